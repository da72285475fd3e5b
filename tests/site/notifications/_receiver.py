"""A real Standard Webhooks receiver on 127.0.0.1 for the tests: verifies, records, misbehaves on purpose.

It verifies every request with the ``standardwebhooks`` package (not the code under
test) and records what came, what it answered and whether the signature held. What it
answers is a policy: ``fail_every_other`` answers 500 to every second request, a
``hang`` policy sleeps past the sender's timeout, a ``block_first`` policy holds the
first request until the test releases it (while the test SIGKILLs the sender).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    """One request as the receiver saw it."""

    webhook_id: str
    timestamp: str
    verified: bool
    payload: Any
    answered: int | None = None
    """The status sent back; None if the receiver never answered (it hung or was cut off)."""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    """The request's bytes as they came (to verify again with another secret)."""


Policy = Callable[["Receiver", int, Received], int | None]
"""``(receiver, request number from 1, request) -> status``; None: do not answer at all."""


def always(status: int) -> Policy:
    return lambda receiver, n, request: status


def fail_every_other(receiver: Receiver, n: int, request: Received) -> int:
    """500 to requests 1, 3, 5, ...; 200 to the others: half the calls fail."""
    return 500 if n % 2 == 1 else 200


def hang(seconds: float) -> Policy:
    def policy(receiver: Receiver, n: int, request: Received) -> int:
        time.sleep(seconds)
        return 200

    return policy


def block_first(then: Policy = fail_every_other) -> Policy:
    """Hold request 1 until ``receiver.release`` is set (the sender is killed meanwhile)."""

    def policy(receiver: Receiver, n: int, request: Received) -> int | None:
        if n == 1:
            receiver.blocked.set()
            receiver.release.wait(60)
            return None
        return then(receiver, n, request)

    return policy


class Receiver:
    """A threaded HTTP server recording Standard Webhooks requests; ``url`` is where it listens."""

    def __init__(self, secret: str = "", policy: Policy | None = None) -> None:
        self.secret = secret
        self.policy = policy or always(200)
        self.answer = b"ok"
        """The body of every answer."""
        self.requests: list[Received] = []
        self.lock = threading.Lock()
        self.blocked = threading.Event()
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/keelgate?token=q-secret"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # -- what came ------------------------------------------------------------------

    def acknowledged(self) -> list[Received]:
        """Requests answered 2xx: what the receiver took in."""
        with self.lock:
            return [r for r in self.requests if r.answered is not None and 200 <= r.answered < 300]

    def figures(self, expected_ids: set[str]) -> dict[str, int]:
        """events, attempts (requests received), duplicates by id, lost, and bad signatures."""
        with self.lock:
            ids = Counter(r.webhook_id for r in self.requests)
            bad = sum(not r.verified for r in self.requests)
        taken = {r.webhook_id for r in self.acknowledged()}
        return {
            "events": len(expected_ids),
            "attempts": sum(ids.values()),
            "duplicates_by_id": sum(count - 1 for count in ids.values()),
            "lost": len(expected_ids - taken),
            "bad_signatures": bad,
            "unexpected_ids": len(set(ids) - expected_ids),
        }

    def wait_for(self, condition: Callable[[], bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.02)
        return condition()

    # -- the handler ----------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    payload = Webhook(receiver.secret).verify(body, headers)
                    verified = True
                except (WebhookVerificationError, ValueError):
                    payload, verified = json.loads(body or b"null"), False
                request = Received(
                    webhook_id=headers.get("webhook-id", ""),
                    timestamp=headers.get("webhook-timestamp", ""),
                    verified=verified,
                    payload=payload,
                    headers=headers,
                    body=body,
                )
                with receiver.lock:
                    receiver.requests.append(request)
                    n = len(receiver.requests)
                status = receiver.policy(receiver, n, request)
                if status is None:
                    return
                # Recorded before the answer leaves: the sender, and the test after it, may
                # look as soon as the answer arrives (set after the write, a test read too early).
                with receiver.lock:
                    request.answered = status
                try:
                    self.send_response(status)
                    self.send_header("content-length", str(len(receiver.answer)))
                    self.end_headers()
                    self.wfile.write(receiver.answer)
                except OSError:  # the sender gave up (timeout) or died: nothing was taken in
                    with receiver.lock:
                        request.answered = None

        return Handler
