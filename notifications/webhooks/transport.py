"""One HTTP POST to a receiver: to the address that was checked, within a hard deadline.

The standard library's ``http.client`` rather than an HTTP client package: it follows
no redirects (a receiver cannot bounce us to an internal address), and it lets us
connect to the vetted IP while sending the URL's host name as ``Host`` and TLS server
name. Socket timeouts bound each read, not the whole exchange, so a receiver that
drips a byte at a time would never be cut off; a timer shuts the socket at the
deadline instead.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass

from notifications.webhooks.targets import IPAddress, Target

MAX_RESPONSE_BYTES = 4096
"""The receiver's answer is read this far and no further (a receiver cannot make us read a gigabyte)."""
RESPONSE_SHOWN = 1000
"""Characters of the answer's body kept with the attempt, for an admin to read in the console."""
USER_AGENT = "Keelgate-Webhooks/1"


@dataclass(frozen=True)
class Response:
    """What one attempt got: a status code, or an error saying why there is none."""

    status: int | None
    error: str
    duration_ms: int
    body: str = ""
    """The start of the receiver's answer (:data:`RESPONSE_SHOWN` characters), undecodable bytes replaced."""

    @property
    def ok(self) -> bool:
        """A 2xx answer; redirects are failures (they are not followed)."""
        return self.status is not None and 200 <= self.status < 300


class _PinnedHTTP(http.client.HTTPConnection):
    """An HTTP connection to a fixed address, whatever the host name resolves to now."""

    def __init__(self, target: Target, address: IPAddress, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((str(self.address), self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPS(_PinnedHTTP):
    """The same over TLS, the certificate checked against the URL's host name."""

    tls = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.host)


def post(
    target: Target, address: IPAddress, body: bytes, headers: dict[str, str], timeout: float
) -> Response:
    """POST ``body`` to ``target`` at ``address``; never raises, never takes longer than ``timeout``."""
    kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    conn = kind(target, address, timeout)
    timed_out = threading.Event()

    def cut() -> None:
        timed_out.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing left to cut
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout, cut)
    timer.daemon = True
    started = time.monotonic()
    timer.start()
    try:
        conn.request("POST", target.path, body=body, headers={"user-agent": USER_AGENT, **headers})
        response = conn.getresponse()
        answer = response.read(MAX_RESPONSE_BYTES)
        status: int | None = response.status
        error = ""
        said = answer.decode("utf-8", errors="replace")[:RESPONSE_SHOWN]
    except (OSError, http.client.HTTPException, ValueError) as exc:
        status, said = None, ""
        # The deadline timer and the socket's own timeout (the same length) race: either is the deadline.
        deadline = timed_out.is_set() or isinstance(exc, socket.timeout | TimeoutError)
        error = f"timed out after {timeout:g}s" if deadline else _describe(exc)
    finally:
        timer.cancel()
        conn.close()
    duration_ms = int((time.monotonic() - started) * 1000)
    return Response(status=status, error=error, duration_ms=duration_ms, body=said)


def _describe(exc: BaseException) -> str:
    """A short, fixed-shape reason: the class and the OS's words, never the receiver's body."""
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or type(exc).__name__}"[:200]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__
