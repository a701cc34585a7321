"""The channels worker that owns the PTYs, and the client and messages web processes use to reach it."""
