"""The Agent Client Protocol's terminal methods, as JSON-RPC over HTTP."""
