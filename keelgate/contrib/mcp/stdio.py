"""``python -m keelgate.contrib.mcp.stdio --url URL [--key-env KEELGATE_API_KEY] [--run-id RUN]``.

Keelgate's MCP gateway on stdio, for clients that can only launch a command: a bridge to
``/mcp/`` over Streamable HTTP, the API key read from the environment. Run it, never
import it; the bridge lives in ``keelgate.contrib.mcp._bridge`` (docs/mcp.md).
"""

from keelgate.contrib.mcp._bridge import main

if __name__ == "__main__":
    raise SystemExit(main())
