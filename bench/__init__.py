"""The benchmark suite: the service against the limit of a minimal asyncio program and against terminado."""
