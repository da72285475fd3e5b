"""A plain MCP proxy, the baseline of benchmarks 11 and 12: ``python -m bench._mcp_proxy UPSTREAM_URL PORT``.

What one writes with the official SDK alone: a low-level ``Server`` over stateless
Streamable HTTP whose ``tools/list`` and ``tools/call`` are forwarded to one upstream over
Streamable HTTP, a new client session per request (no state to lose, as the gateway).
No keys, no policy, no deduplication: a call re-issued after a broken stream is forwarded
again.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server

UPSTREAM = sys.argv[1] if len(sys.argv) > 1 else ""


@asynccontextmanager
async def upstream() -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(UPSTREAM) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    async with upstream() as session:
        return await session.list_tools()


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    async with upstream() as session:
        result = await session.call_tool(params.name, dict(params.arguments or {}))
    assert isinstance(result, types.CallToolResult)
    return result


server: Server[Any] = Server("plain-proxy", on_list_tools=list_tools, on_call_tool=call_tool)

if __name__ == "__main__":
    import uvicorn

    app = server.streamable_http_app(stateless_http=True, json_response=False)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
