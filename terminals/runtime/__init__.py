"""The PTY runtime: plain Python, no Django."""
