"""The Model Context Protocol interface: Streamable HTTP at /mcp (our tool set) and /mcp/<profile> (the seeds'
tool sets), served by the official SDK over the same use cases, keys, throttles and audit trail as the REST API."""
