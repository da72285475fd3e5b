"""The stdio bridge: an MCP server on stdin/stdout that relays to Keelgate's ``/mcp/`` over HTTP.

For clients that can only launch a command (Claude Desktop, Cursor and the like): the
client starts ``python -m keelgate.contrib.mcp.stdio --url https://keelgate.example/mcp/``
with the API key in an environment variable (``KEELGATE_API_KEY`` unless ``--key-env``
names another), and sees the gateway's tools as if Keelgate were a local server. Both
ends are the official SDK: a low-level ``Server`` on stdio, a ``ClientSession`` over
Streamable HTTP.

Each request opens its own HTTP session (the gateway is stateless, so a gateway restart
costs the bridge nothing). A call whose HTTP exchange broke is sent again, as MCP's
2026-07-28 revision asks of a client: the gateway knows it by what it asks, so the
second arrival returns the first one's outcome and never runs it twice (docs/mcp.md). The
key is read from the environment and sent only as the Authorization header: never
printed, logged or passed on the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

__all__ = ["BridgeConfig", "build_bridge", "main"]

log = logging.getLogger("keelgate.mcp.stdio")

DEFAULT_KEY_ENV = "KEELGATE_API_KEY"
RESENDS = 3
"""How many times a call whose HTTP exchange broke is sent again (each is the same call)."""


@dataclass(frozen=True)
class BridgeConfig:
    """Where the gateway is and the key to reach it with (``repr`` never shows the key)."""

    url: str
    key: str
    run_id: str | None = None
    """Sent as ``Keelgate-Run-Id`` on every request: the MCP run its calls belong to."""

    def __repr__(self) -> str:
        return f"BridgeConfig(url={self.url!r}, key='***', run_id={self.run_id!r})"


@asynccontextmanager
async def _gateway(config: BridgeConfig) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {config.key}"}
    if config.run_id:
        headers["Keelgate-Run-Id"] = config.run_id
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(config.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def build_bridge(config: BridgeConfig) -> Server[Any]:
    """The stdio side: ``tools/list`` and ``tools/call`` relayed to the gateway as they are."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            async with _gateway(config) as gateway:
                return await gateway.list_tools(params=params)
        except MCPError:
            raise
        except Exception as exc:
            raise MCPError(types.INTERNAL_ERROR, _unreachable(exc)) from None

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        async def relay(progress: float, total: float | None, message: str | None) -> None:
            try:
                await ctx.session.report_progress(progress, total, message)
            except Exception:  # progress is a courtesy: the call goes on
                log.debug("progress not relayed", exc_info=True)

        failure: Exception | None = None
        for _ in range(1 + RESENDS):
            try:
                async with _gateway(config) as gateway:
                    return await gateway.call_tool(
                        params.name, params.arguments, progress_callback=relay, meta=params.meta
                    )
            except MCPError:
                raise
            except Exception as exc:  # the exchange broke: the same call again (never run twice)
                failure = exc
                await anyio.sleep(0.5)
        assert failure is not None
        return types.CallToolResult(
            content=[types.TextContent(text=f"{_unreachable(failure)} Calling again returns its outcome.")],
            is_error=True,
        )

    return Server("keelgate-stdio", on_list_tools=list_tools, on_call_tool=call_tool)


def _unreachable(exc: BaseException) -> str:
    """Says the gateway was not reached, and how, without the exception's text (it may quote a URL)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"Keelgate's gateway could not be reached ({type(exc).__name__})."


def _config(argv: Sequence[str] | None) -> BridgeConfig:
    parser = argparse.ArgumentParser(
        prog="python -m keelgate.contrib.mcp.stdio",
        description="Serve Keelgate's MCP gateway on stdio, for clients that launch a command.",
    )
    parser.add_argument("--url", required=True, help="the gateway, e.g. https://keelgate.example/mcp/")
    parser.add_argument(
        "--key-env",
        default=DEFAULT_KEY_ENV,
        help=f"the environment variable that holds the API key (default {DEFAULT_KEY_ENV})",
    )
    parser.add_argument("--run-id", help="the MCP run the calls belong to (Keelgate-Run-Id)")
    options = parser.parse_args(argv)
    key = os.environ.get(options.key_env, "").strip()
    if not key:
        parser.error(f"the environment variable {options.key_env} holds no API key")
    return BridgeConfig(url=options.url, key=key, run_id=options.run_id)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bridge until the client closes stdin. Logs go to stderr; stdout is the protocol's."""
    config = _config(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server = build_bridge(config)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
    return 0
