"""One HTTP request straight through an ASGI application, as a server would make it."""

from __future__ import annotations

import asyncio
from typing import Any


def asgi_get(application: Any, path: str) -> dict[str, Any]:
    """GET ``path``: the status, the headers (lower-case names) and the whole body."""
    sent = asyncio.run(asgi_request(application, path))
    return {
        "status": sent[0]["status"],
        "headers": {k.decode().lower(): v.decode() for k, v in sent[0].get("headers", [])},
        "body": b"".join(m.get("body", b"") for m in sent[1:]),
    }


async def asgi_request(application: Any, path: str) -> list[dict[str, Any]]:
    """GET ``path`` on the running event loop: the messages the application sent."""
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # no disconnect: the response ends the exchange
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 5000),
        "server": ("localhost", 80),
    }
    await application(scope, receive, send)
    return sent
