"""A local HTTP server that speaks the OpenAI chat-completions wire format, scripted per test.

It answers ``POST /v1/chat/completions`` (streaming off) with the replies queued by the
test, in order, and records every request it received. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP reply: a status, a body (JSON value or raw bytes) and a delay."""

    body: Any = None
    status: int = 200
    delay: float = 0.0
    content_type: str = "application/json"


@dataclass
class Received:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Names lower-cased."""
    body: Any


@dataclass
class FakeOpenAI:
    """The scripted server; ``url`` is the base URL to give the client."""

    replies: deque[Reply] = field(default_factory=deque)
    requests: list[Received] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reply(self, *replies: Reply | dict[str, Any]) -> None:
        """Queue replies; a dict is a 200 JSON body."""
        for r in replies:
            self.replies.append(r if isinstance(r, Reply) else Reply(r))

    @property
    def last(self) -> Any:
        """The JSON body of the last request."""
        return self.requests[-1].body

    def start(self) -> None:
        """Listen on a free local port in a daemon thread."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                fake.requests.append(
                    Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                if self.path != "/v1/chat/completions":
                    reply = Reply({"error": {"message": "not found", "type": "invalid_request_error"}}, 404)
                elif fake.replies:
                    reply = fake.replies.popleft()
                else:
                    reply = Reply({"error": {"message": "no scripted reply", "type": "server_error"}}, 500)
                if reply.delay and fake.stopping.wait(reply.delay):
                    return
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        """Wake any delayed reply and shut down."""
        self.stopping.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """A function tool call as the wire format carries it (arguments as a JSON string)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": call_id or f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def completion(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    refusal: str | None = None,
    model: str = "fake-model",
    usage: tuple[int, int] | None = (100, 20),
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """A chat-completions response body."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }
        ],
    }
    if usage is not None:
        body["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return body


def error(status: int, message: str = "boom", kind: str = "server_error") -> Reply:
    """An error reply in the wire format."""
    return Reply({"error": {"message": message, "type": kind, "code": None}}, status)
