"""The memory store as an MCP server (``hybridsql mcp``), on the official ``mcp`` SDK.

- ``server``: the tools both transports share, and the server over stdio;
- ``http``: the server over HTTP: one index per project, sessions, tokens;
- ``keys``: the HTTP server's key file: which projects a key reaches, to read or to write;
- ``http_limits``: the HTTP server's connections, bounded before a request reaches the app.

The SDK is the top-level package ``mcp``; every import here is absolute, so ``import mcp``
inside this package is the SDK's. This face imports none of its modules.
"""
