"""Talking to an upstream MCP server with the official client: list its tools, call one.

Each call opens its own connection (a child process for ``command``, an HTTP exchange
for ``url``) and closes it after: a gateway process or a worker holds no session that a
restart could lose half-way, and a call forwarded by a worker needs nothing of the
request that asked for it.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

__all__ = ["IDEMPOTENCY_HEADER", "UpstreamError", "UpstreamSpec", "call_tool", "list_tools"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
"""Carries the gateway's key to an upstream reached over HTTP."""


class UpstreamError(Exception):
    """The upstream could not be reached or did not answer as MCP (``str`` says how, never a secret)."""


@dataclass(frozen=True)
class UpstreamSpec:
    """How to reach one upstream: a command to launch (stdio) or a Streamable HTTP URL."""

    name: str
    command: str = ""
    url: str = ""
    cwd: str | None = None

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an upstream has a command or a url, not both")


@asynccontextmanager
async def _session(spec: UpstreamSpec, headers: Mapping[str, str]) -> AsyncIterator[ClientSession]:
    async with AsyncExitStack() as stack:
        if spec.command:
            argv = shlex.split(spec.command)
            params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=spec.cwd)
            read, write = await stack.enter_async_context(stdio_client(params))
        else:
            client = await stack.enter_async_context(create_mcp_http_client(headers=dict(headers)))
            read, write = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=client)
            )
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield session


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


async def list_tools(spec: UpstreamSpec, *, timeout: float) -> list[dict[str, Any]]:
    """The upstream's tools as MCP writes them (``name``, ``description``, ``inputSchema``...).

    Every page of the list. Raises :class:`UpstreamError` when it cannot be had in ``timeout``.
    """
    try:
        with anyio.fail_after(timeout):
            async with _session(spec, {}) as session:
                tools: list[dict[str, Any]] = []
                cursor: str | None = None
                while True:
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_tools(params=params)
                    tools.extend(_dump(t) for t in page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        return tools
    except TimeoutError as exc:
        raise UpstreamError("the upstream did not list its tools in time") from exc
    except UpstreamError:
        raise
    except Exception as exc:  # a dead, absent or garbled upstream: say which kind, never its text
        raise UpstreamError(f"the upstream could not be reached ({_kind(exc)})") from exc


async def call_tool(
    spec: UpstreamSpec, tool: str, arguments: Mapping[str, Any], *, idempotency_key: str | None = None
) -> dict[str, Any]:
    """Call ``tool`` once and return its ``CallToolResult`` as JSON (``isError`` results too).

    ``idempotency_key`` goes in the ``Idempotency-Key`` header over HTTP (the argument a
    policy names is filled by the caller). The caller bounds the time: a WRITE that does
    not return must stay an unknown outcome, so nothing here retries. Raises
    :class:`UpstreamError` when the call got no MCP answer.
    """
    headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key else {}
    try:
        async with _session(spec, headers) as session:
            result = await session.call_tool(tool, dict(arguments))
    except Exception as exc:
        raise UpstreamError(f"the upstream gave no answer ({_kind(exc)})") from exc
    return _dump(result)


def _kind(exc: BaseException) -> str:
    """The innermost exception's type name (task groups wrap what happened)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return type(exc).__name__
