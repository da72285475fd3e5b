"""No request of any shape writes a credential to the logs of the processes ``keelgate_serve`` starts.

The whole product runs as ``make run`` runs it (Daphne, a worker, a notifier, their
stdout and stderr captured to files); a real API key, the operator's password and a
session id are then sent every way a client might send them: query parameters of many
names and cases, a bare value, a path segment, ``Authorization`` with each scheme or
none, other headers, form fields, the websocket's URL. Not one of them may appear in
any line, and the access log's line for each request must still show its path.
"""

from __future__ import annotations

import base64
import http.client
import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from sitekit.logs import REDACTED

from .._serve import ROOT, free_port, keelgate_serve, serve_env, stop

PASSWORD = "pw-serve-Operator-123"
WRONG_PASSWORD = "wrong-Pa55word-xyzzy"
QUERY_NAMES = [
    "api_key",
    "key",
    "token",
    "access_token",
    "secret",
    "password",
    "auth",
    "apikey",
    "x-api-key",
    "API_KEY",
    "Api%5FKey",
    "sig",
    "signature",
    "session",
    "sessionid",
    "client_secret",
]
"""Query parameters that name a credential, as clients spell them."""


def _make_key(env: dict[str, str]) -> str:
    """A real API key of the demo operator, made in the server's database."""
    code = (
        "from django.contrib.auth import get_user_model; from tenants.models import Tenant; "
        "from tenants.api_keys import api_key_create; "
        "_, key = api_key_create(by='tester', tenant=Tenant.objects.get(slug='demo'), "
        "user=get_user_model().objects.get(username='operator'), name='logs'); print(key)"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    key = done.stdout.strip().splitlines()[-1]
    assert key.startswith("kg_")
    return key


def _status(port: int, target: str, *, method: str = "GET", body: bytes | None = None, **headers: str) -> int:
    """Send one request exactly as given (the target is not re-encoded) and return its status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, target, body=body, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def _websocket(port: int, target: str, **headers: str) -> bytes:
    """Open a websocket handshake to ``target``: the server's status line (101, or a refusal)."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Origin: http://127.0.0.1:{port}",
        *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items()),
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


def _log_in(port: int, password: str) -> tuple[int, str]:
    """POST the console's login form (CSRF token and all); the status and the session id, if any."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{port}"
    form = opener.open(f"{base}/login/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    fields = {"csrfmiddlewaretoken": token, "username": "operator", "password": password}
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(f"{base}/login/", data=data, headers={"Referer": f"{base}/login/"})
    try:
        status = opener.open(request, timeout=30).status
    except urllib.error.HTTPError as exc:
        status = exc.code
    session = next((c.value for c in jar if c.name == "sessionid"), "")
    return status, session


def test_no_credential_of_any_shape_reaches_a_log_of_keelgate_serve(tmp_path: Path) -> None:
    """Every shape of every credential, against the real processes: no line holds one; the
    access log's lines still show each path, with ``[redacted]`` where a value was."""
    env = serve_env(tmp_path, KEELGATE_LOG_LEVEL="DEBUG", PYTHONUNBUFFERED="1")
    out_path, err_path = tmp_path / "serve.out", tmp_path / "serve.err"
    with (
        out_path.open("wb") as out,
        err_path.open("wb") as err,
        keelgate_serve(env, "--password", PASSWORD, stdout=out, stderr=err) as (proc, port),
    ):
        key = _make_key(env)
        secret = key.split("_", 2)[2]
        encoded = key.replace("_", "%5F")
        assert _status(port, "/api/v1/runs", Authorization=f"Bearer {key}") == 200  # a real, working key

        # The reported fault first: the key as a query parameter is refused (422) and was logged whole.
        assert _status(port, f"/api/v1/runs?api_key={key}") in (401, 422)
        for name in QUERY_NAMES:
            _status(port, f"/api/v1/runs?status=waiting&{name}={key}")
        _status(port, f"/api/v1/runs?q={key}")  # a key under a name that says nothing
        _status(port, f"/api/v1/runs?q={encoded}")  # ... percent-encoded
        _status(port, f"/api/v1/runs?{key}")  # bare
        _status(port, f"/api/v1/runs/{key}")  # in the path: the API's 404 and Django's log line
        _status(port, f"/audit/{key}/")  # a console path

        basic_user = base64.b64encode(f"operator:{key}".encode()).decode()
        basic_key = base64.b64encode(f"{key}:".encode()).decode()
        for value in (f"Bearer {key}x", f"Basic {basic_user}", f"Basic {basic_key}", f"Token {key}", key):
            _status(port, "/api/v1/runs", Authorization=value)
        _status(port, "/api/v1/runs", **{"X-API-Key": key, "Api-Key": key, "X-Auth-Token": key})
        _status(
            port,
            "/api/v1/runs",
            method="POST",
            body=urllib.parse.urlencode({"api_key": key, "password": PASSWORD}).encode(),
            **{"Content-Type": "application/x-www-form-urlencoded"},
        )

        assert _log_in(port, WRONG_PASSWORD)[0] == 200  # the form again, no session
        status, session = _log_in(port, PASSWORD)
        assert status == 200 and session  # followed the redirect to the inbox
        assert _status(port, "/api/v1/runs?tenant=demo", Cookie=f"sessionid={session}") == 200

        _websocket(port, f"/ws/inbox/?api_key={key}&token={key}")  # no session: closed at once
        cookie = f"sessionid={session}"
        opened = _websocket(port, f"/ws/inbox/?session={session}&key={key}", Cookie=cookie)
        assert opened.startswith(b"HTTP/1.1 101"), opened

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)

    texts = {"stdout": out_path.read_text(errors="replace"), "stderr": err_path.read_text(errors="replace")}
    for log in tmp_path.rglob("*.log"):
        texts[str(log.relative_to(tmp_path))] = log.read_text(errors="replace")
    secrets = {
        "api key": key,
        "api key secret": secret,
        "api key, percent-encoded": encoded,
        "basic credentials": basic_user,
        "basic key": basic_key,
        "password": PASSWORD,
        "wrong password": WRONG_PASSWORD,
        "session id": session,
    }
    leaked = {(name, at) for name, value in secrets.items() for at, text in texts.items() if value in text}
    assert not leaked, f"credentials in the logs: {sorted(leaked)}"

    access = texts["stdout"]
    assert f'"GET /api/v1/runs?api_key={REDACTED}"' in access
    for name in QUERY_NAMES:
        assert f"/api/v1/runs?status=waiting&{name}={REDACTED}" in access, name
    for shown in (
        f"/api/v1/runs?q={REDACTED}",
        f"/api/v1/runs?{REDACTED}",
        f"/api/v1/runs/{REDACTED}",
        f"/audit/{REDACTED}/",
        "POST /api/v1/runs",
        "POST /login/",
        "/ws/inbox/",
    ):
        assert shown in access, shown


def test_a_web_process_on_its_own_port_redacts_its_access_log(tmp_path: Path) -> None:
    """docs/deploy.md's units (``python -m keelgate_site.web_process -p <port>``, no shared
    socket) write the same redacted lines: a key-shaped secret in a query never appears."""
    port = free_port()
    key = "kg_0123456789ab_" + "Wq3-secret_part" * 3
    log = tmp_path / "web.log"
    argv = [sys.executable, "-m", "keelgate_site.web_process", "-b", "127.0.0.1", "-p", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, "keelgate_site.asgi:application"],
            cwd=ROOT,
            env=serve_env(tmp_path, PYTHONUNBUFFERED="1"),
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 90
        while "Listening on" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        assert _status(port, f"/api/v1/no-such-path?token={key}&page=2") == 404
    finally:
        stop([proc])
    text = log.read_text(errors="replace")
    assert "Wq3-secret_part" not in text
    assert f'"GET /api/v1/no-such-path?token={REDACTED}&page=2" 404' in text
