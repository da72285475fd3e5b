"""What benchmarks 11 and 12 (and ``tests/site/mcp_gateway/test_sigkill.py``) share: the MCP systems.

Three ways for the official client to reach one counting upstream
(``tests/contrib/mcp/upstream_server.py`` over Streamable HTTP, a JSON line per execution
in its ledger):

- ``direct``: the upstream itself;
- ``proxy``: ``bench/_mcp_proxy.py``, a plain low-level-``Server`` proxy;
- ``gateway``: Keelgate's ``/mcp/``, in the production topology's processes: a Daphne web
  process on a listening socket this process holds (as ``keelgate_serve`` does), so a
  restarted Daphne takes over the connections queued meanwhile, and a ``keelgate_worker``.
  Its database is set up in one ``manage.py shell`` (one Django start, not one per command):
  tenant ``bench``, operator ``agent`` (reconciler: calls tools and settles unknown
  outcomes) and its API key, upstream ``u`` by URL with ``send`` a WRITE (no approval, its
  key in the ``key`` argument) and ``lookup`` a READ, and any others the caller names.

Every process is a child this module starts, kills by its own pid and restarts, as a
supervisor (systemd's ``Restart=always``) would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bench._common import REPO

UPSTREAM_SCRIPT = REPO / "tests" / "contrib" / "mcp" / "upstream_server.py"
TENANT = "bench"
POLICY = """
timeout_seconds = 20
[tools.lookup]
side_effect = "read"
[tools.send]
side_effect = "write"
idempotency_argument = "key"
"""
_SETUP = """
import io, sys
from django.core.management import call_command
call_command("migrate", verbosity=0)
call_command("keelgate_tenant", "{tenant}")
call_command("keelgate_operator", "agent", tenant="{tenant}", role="reconciler", password="pw-bench-123456")
out = io.StringIO()
call_command("create_api_key", tenant="{tenant}", user="agent", stdout=out)
for options in {upstreams!r}:
    call_command("keelgate_mcp_upstream", tenant="{tenant}", **options)
print("KEY=" + out.getvalue().strip().splitlines()[-1])
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline: float = 120) -> None:
    """Until something accepts on ``port`` (the process must stay alive meanwhile)."""
    end = time.monotonic() + deadline
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > end:
                raise RuntimeError(f"nothing listens on {port}") from None
            time.sleep(0.1)


class Child:
    """One supervised child process: started, SIGKILLed by pid, started again."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, **popen: Any) -> None:
        self.name, self.argv, self.env, self.log, self.popen = name, argv, env, log, popen
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, **self.popen
            )

    def kill(self) -> None:
        """SIGKILL, reaped; the caller starts it again."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.kills += 1
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Upstream:
    """The counting upstream on its own port; its ledger counts executions."""

    def __init__(self, root: Path, *, send_seconds: float = 0.0, label: str = "upstream") -> None:
        self.port = free_port()
        self.ledger = root / f"{label}.ledger"
        env = {**os.environ, "UPSTREAM_SEND_SECONDS": str(send_seconds)}
        argv = [sys.executable, str(UPSTREAM_SCRIPT), str(self.ledger), str(self.port)]
        self.child = Child(label, argv, env, root / f"{label}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.child.start()
        assert self.child.proc is not None
        _wait_port(self.port, self.child.proc)

    def executions(self, text: str) -> int:
        """Ledger lines of a ``send`` whose ``text`` is ``text``."""
        if not self.ledger.exists():
            return 0
        count = 0
        for line in self.ledger.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                count += int(entry["tool"] == "send" and entry["arguments"].get("text") == text)
        return count


class Proxy:
    """``bench/_mcp_proxy.py`` in front of ``upstream``."""

    def __init__(self, root: Path, upstream: Upstream) -> None:
        self.port = free_port()
        argv = [sys.executable, "-m", "bench._mcp_proxy", upstream.url, str(self.port)]
        self.child = Child("proxy", argv, dict(os.environ), root / "proxy.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.child.start()
        assert self.child.proc is not None
        _wait_port(self.port, self.child.proc)


def site_env(root: Path, database_url: str = "", **extra: str) -> dict[str, str]:
    """Production settings on a scratch database (SQLite under ``root`` unless ``database_url``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEELGATE_") and k != "DATABASE_URL"}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    (root / "var").mkdir(exist_ok=True)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "keelgate_site.settings",
            "KEELGATE_DEBUG": "0",
            "KEELGATE_SECRET_KEY": secrets.token_urlsafe(48),
            "KEELGATE_AUDIT_SIGNING_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
            "KEELGATE_SSL_REDIRECT": "0",
            "KEELGATE_API_RATE_LIMIT": "0",
            "KEELGATE_VAR_DIR": str(root / "var"),
            "KEELGATE_PAPER_BROKERAGE": str(root / "brokerage.sqlite3"),
            "KEELGATE_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(REPO),
        }
    )
    if database_url:
        env["DATABASE_URL"] = database_url
    env.update(extra)
    return env


class Site:
    """Keelgate's ``/mcp/``: one Daphne on a held socket and one worker, each killable."""

    def __init__(
        self,
        root: Path,
        upstream: Upstream,
        *,
        database_url: str = "",
        wait_seconds: float = 4,
        lease_seconds: float | None = 2,
        poll_seconds: float | None = 0.05,
        label: str = "site",
        more_upstreams: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """``more_upstreams``: name -> (a stdio command, its policy's TOML), beside ``u``."""
        self.root = root
        self.env = site_env(
            root,
            database_url,
            KEELGATE_MCP_WAIT_SECONDS=str(wait_seconds),
        )
        (root / "policy.toml").write_text(POLICY)
        upstreams = [{"name": "u", "url": upstream.url, "policy": str(root / "policy.toml")}]
        for name, (command, policy) in (more_upstreams or {}).items():
            (root / f"{name}.toml").write_text(policy)
            upstreams.append({"name": name, "command": command, "policy": str(root / f"{name}.toml")})
        script = _SETUP.format(tenant=TENANT, upstreams=upstreams)
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", script],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        self.key = next(line[4:] for line in done.stdout.splitlines() if line.startswith("KEY="))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.sock.set_inheritable(True)
        self.port = int(self.sock.getsockname()[1])
        fd = str(self.sock.fileno())
        web_argv = [
            sys.executable,
            "-m",
            "keelgate_site.web_process",
            "--fd",
            fd,
            "keelgate_site.asgi:application",
        ]
        self.web = Child("web", web_argv, self.env, root / f"{label}-web.log", pass_fds=(self.sock.fileno(),))
        worker_argv = [sys.executable, "manage.py", "keelgate_worker"]
        if lease_seconds is not None:
            worker_argv += ["--lease-seconds", str(lease_seconds)]
        if poll_seconds is not None:
            worker_argv += ["--poll-seconds", str(poll_seconds)]
        self.worker = Child("worker", worker_argv, self.env, root / f"{label}-worker.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp/"

    def start(self) -> None:
        self.web.start()
        self.worker.start()
        end = time.monotonic() + 180
        while self.status() != 404:  # the JSON 404 of an unknown API path: Daphne answers
            assert self.web.proc is not None and self.web.proc.poll() is None, (
                self.root / "web.log"
            ).read_text()
            assert time.monotonic() < end, "Daphne did not answer"
            time.sleep(0.2)

    def status(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/no-such-path", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One REST API request with the agent's key."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stop(self) -> None:
        self.web.stop()
        self.worker.stop()
        self.sock.close()


@asynccontextmanager
async def client(url: str, key: str | None = None) -> AsyncIterator[Any]:
    """An initialized official client session (the key as a Bearer header, if any)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call_once(url: str, key: str | None, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
    """One call in a new session (a new request id), or an exception if its stream broke."""
    async with asyncio.timeout(timeout), client(url, key) as session:
        return await session.call_tool(tool, arguments)
