"""The live terminal over WebSocket."""
