"""A local fake of Slack for the tests: the Web API the official client is pointed at, and response URLs.

It speaks what ``slack_sdk``'s ``WebClient`` calls (``chat.postMessage``,
``chat.update`` and ``views.open``, JSON bodies, a Bearer token) and keeps every message with each of its
versions, so a test reads what people would see. ``/hooks/...`` takes the replies only
a clicker sees. It misbehaves on purpose: ``status`` answers every API call with an
HTTP error (Slack down), ``revoked`` refuses the token as Slack does
(``token_revoked``).

:func:`signed` signs a body exactly as Slack does (HMAC-SHA256 of
``v0:<timestamp>:<body>`` under the signing secret), written here with ``hmac`` rather
than with the SDK whose verifier is under test.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

TOKEN = "xoxb-1234-5678-SECRETTOKENVALUE"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM = "T0KEELGATE"
CHANNEL = "C0APPROVALS"


@dataclass
class Posted:
    """One message in a channel, with each version it had (the first is the post)."""

    channel: str
    ts: str
    versions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Everything the current version shows, as one string."""
        return json.dumps(self.versions[-1], ensure_ascii=False)

    @property
    def blocks(self) -> list[dict[str, Any]]:
        return list(self.versions[-1].get("blocks") or [])

    def buttons(self) -> list[dict[str, Any]]:
        return [e for b in self.blocks if b.get("type") == "actions" for e in b.get("elements", [])]


class FakeSlack:
    """A threaded HTTP server on 127.0.0.1: ``api`` is the Web API's base URL, ``hooks`` for replies."""

    def __init__(self) -> None:
        self.messages: list[Posted] = []
        self.replies: list[dict[str, Any]] = []
        self.views: list[dict[str, Any]] = []
        """Each form opened (``views.open``): its ``trigger_id``, and the view with the id given it."""
        self.calls: list[tuple[str, str]] = []
        """(method, Authorization header) of every API call."""
        self.status: int | None = None
        self.revoked = False
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def api(self) -> str:
        return f"{self.url}/api/"

    @property
    def hooks(self) -> str:
        return f"{self.url}/hooks/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def posts(self) -> int:
        return len(self.messages)

    def updates(self) -> int:
        return sum(len(m.versions) - 1 for m in self.messages)

    def only(self) -> Posted:
        (message,) = self.messages
        return message

    def _api(self, method: str, auth: str, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.calls.append((method, auth))
            if self.status is not None:
                return self.status, {"ok": False, "error": "fatal_error"}
            if self.revoked:
                return 200, {"ok": False, "error": "token_revoked"}
            if auth != f"Bearer {TOKEN}":
                return 200, {"ok": False, "error": "invalid_auth"}
            version = {"text": data.get("text"), "blocks": data.get("blocks")}
            if method == "chat.postMessage":
                ts = f"{1_700_000_000 + len(self.messages)}.000100"
                self.messages.append(Posted(str(data.get("channel")), ts, [version]))
                return 200, {"ok": True, "channel": data.get("channel"), "ts": ts, "message": version}
            if method == "chat.update":
                for message in self.messages:
                    if message.channel == data.get("channel") and message.ts == data.get("ts"):
                        message.versions.append(version)
                        return 200, {"ok": True, "channel": message.channel, "ts": message.ts}
                return 200, {"ok": False, "error": "message_not_found"}
            if method == "views.open":
                view = data.get("view")
                if not data.get("trigger_id") or not isinstance(view, dict):
                    return 200, {"ok": False, "error": "invalid_arguments"}
                opened = {**view, "id": f"V0FORM{len(self.views):04d}"}
                self.views.append({"trigger_id": data["trigger_id"], "view": opened})
                return 200, {"ok": True, "view": opened}
            return 200, {"ok": False, "error": "unknown_method"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    data = json.loads(raw or b"{}")
                except ValueError:
                    data = {}
                if self.path.startswith("/hooks/"):
                    with fake.lock:
                        fake.replies.append({"path": self.path, **data})
                    self._answer(200, b"ok", "text/plain")
                    return
                method = self.path.removeprefix("/api/")
                status, body = fake._api(method, self.headers.get("authorization", ""), data)
                self._answer(status, json.dumps(body).encode(), "application/json")

            def _answer(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def signed(body: bytes, *, secret: str = SIGNING_SECRET, at: float | None = None) -> dict[str, str]:
    """The headers Slack sends with ``body``: its timestamp and ``v0=`` HMAC-SHA256 signature."""
    timestamp = str(int(time.time() if at is None else at))
    base = b"v0:" + timestamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp, "HTTP_X_SLACK_SIGNATURE": f"v0={digest}"}


_CLICKS = iter(range(1, 10**9))


def click_body(
    value: str,
    *,
    user: str,
    hooks: str,
    action_id: str = "keelgate_approve",
    team: str = TEAM,
    action_ts: str | None = None,
) -> bytes:
    """A ``block_actions`` request body as Slack sends it for a button click."""
    n = next(_CLICKS)
    payload = {
        "type": "block_actions",
        "team": {"id": team, "domain": "keelgate"},
        "user": {"id": user, "username": user.lower(), "team_id": team},
        "api_app_id": "A0KEELGATE",
        "token": "legacy-verification-token",
        "trigger_id": f"{n}.trigger",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": CHANNEL},
        "channel": {"id": CHANNEL, "name": "approvals"},
        "response_url": f"{hooks}actions/{team}/{n}/xyz",
        "actions": [
            {
                "action_id": action_id,
                "block_id": "b1",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": value,
                "style": "primary",
                "type": "button",
                "action_ts": action_ts or f"{time.time():.6f}{n}",
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def submission_body(view: dict[str, Any], *, user: str, typed: str | None, team: str = TEAM) -> bytes:
    """A ``view_submission`` request body: the form ``view`` (as opened) sent back with ``typed`` in
    its input, keyed by the input's block and action ids as Slack keys it."""
    inputs = [b for b in view.get("blocks") or [] if b.get("type") == "input"]
    block, action = (inputs[0]["block_id"], inputs[0]["element"]["action_id"]) if inputs else ("x", "x")
    state = {"values": {block: {action: {"type": "plain_text_input", "value": typed}}}}
    payload = {
        "type": "view_submission",
        "team": {"id": team, "domain": "keelgate"},
        "user": {"id": user, "username": user.lower(), "team_id": team},
        "api_app_id": "A0KEELGATE",
        "token": "legacy-verification-token",
        "trigger_id": "9.trigger",
        "view": {**view, "state": state, "hash": "1700000000.abc", "team_id": team},
        "response_urls": [],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def command_body(text: str, *, user: str, team: str = TEAM) -> bytes:
    """A slash command's request body (``/keelgate <text>``)."""
    return urlencode(
        {
            "token": "legacy-verification-token",
            "team_id": team,
            "team_domain": "keelgate",
            "channel_id": CHANNEL,
            "user_id": user,
            "user_name": user.lower(),
            "command": "/keelgate",
            "text": text,
            "response_url": "https://hooks.slack.com/commands/T/1/x",
            "trigger_id": "1.trigger",
        }
    ).encode()
