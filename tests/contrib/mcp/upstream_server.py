"""An upstream MCP server for the tests: one READ and one WRITE that count what they did.

``python upstream_server.py LEDGER [PORT]``: every execution appends a JSON line to LEDGER
(the downstream system's record, with the ``Idempotency-Key`` header it was sent over
HTTP), so a test counts executions, not answers. With PORT it serves Streamable HTTP at
``http://127.0.0.1:PORT/mcp``, else stdio. ``send`` is the
WRITE (its policy names ``key`` as the idempotency argument); ``lookup`` is the READ;
``crash``, ``hang`` and ``garbage`` misbehave as their names say. Its annotations lie on
purpose: ``send`` claims to be read-only. ``UPSTREAM_SEND_SECONDS`` (default 0) makes ``send``
take that long, half before its ledger line and half after, as a real API's round trip
would: the window in which a kill loses the answer of a call that took effect.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

LEDGER = sys.argv[1]
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else None
SEND_SECONDS = float(os.environ.get("UPSTREAM_SEND_SECONDS") or 0)

TOOLS = [
    types.Tool(
        name="lookup",
        description="Look up a city's weather (reads only).",
        input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
    types.Tool(
        name="send",
        description="Send a message to someone.",
        input_schema={
            "type": "object",
            "properties": {
                "to": {"type": "string"},
                "text": {"type": "string", "maxLength": 100},
                "key": {"type": "string"},
            },
            "required": ["to", "text", "key"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="post",
        description="Post a note (a WRITE with no key argument: over HTTP the key comes as a header).",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    types.Tool(name="crash", description="Dies mid-call.", input_schema={"type": "object"}),
    types.Tool(name="hang", description="Never answers.", input_schema={"type": "object"}),
    types.Tool(name="garbage", description="Answers with garbage.", input_schema={"type": "object"}),
]


def record(tool: str, arguments: dict[str, Any], header: str | None) -> None:
    line = {"tool": tool, "arguments": arguments, "idempotency_header": header, "pid": os.getpid()}
    with open(LEDGER, "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(line) + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = dict(params.arguments or {})
    request = getattr(ctx, "request", None)
    if params.name == "send" and SEND_SECONDS:
        await anyio.sleep(SEND_SECONDS / 2)
    record(params.name, arguments, request.headers.get("idempotency-key") if request is not None else None)
    if params.name == "lookup":
        text = f"sunny in {arguments.get('city')}"
        return types.CallToolResult(content=[types.TextContent(text=text)])
    if params.name == "send":
        with open(LEDGER, encoding="utf-8") as ledger:
            sent = sum(1 for line in ledger if '"send"' in line)
        if SEND_SECONDS:
            await anyio.sleep(SEND_SECONDS / 2)
        return types.CallToolResult(
            content=[types.TextContent(text=f"sent #{sent} to {arguments['to']}")],
            structured_content={"message_id": f"m-{sent}", "key": arguments.get("key")},
        )
    if params.name == "post":
        return types.CallToolResult(content=[types.TextContent(text="posted")])
    if params.name == "crash":
        os._exit(3)
    if params.name == "hang":
        await anyio.sleep(3600)
    if params.name == "garbage":
        sys.stdout.write("this is not JSON-RPC\n{\n")
        sys.stdout.flush()
        time.sleep(3600)
    return types.CallToolResult(content=[types.TextContent(text="unknown tool")], is_error=True)


server: Server[Any] = Server("keelgate-test-upstream", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if PORT is None:
        anyio.run(main)
    else:
        import uvicorn

        app = server.streamable_http_app(stateless_http=True, json_response=True)
        uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
