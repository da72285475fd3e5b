"""The production topology of docs/deploy.md, brought up on this machine as processes.

PostgreSQL (a scratch database on ``KEELGATE_DEPLOY_PG``, default the test server),
Redis for the channel layer and the shared cache (``KEELGATE_DEPLOY_REDIS``), two
Daphne processes on two ports, two ``keelgate_worker``, one ``keelgate_notify`` and one
``keelgate_sequencer``, all
with production settings (``KEELGATE_DEBUG=0``). Run with ``pytest tests/deploy``
(``make test`` does); a missing server skips on a laptop and fails when ``CI=true``.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
PG_URL = os.environ.get("KEELGATE_DEPLOY_PG", "postgres://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("KEELGATE_DEPLOY_REDIS", "redis://127.0.0.1:6379/11")
PASSWORD = "pw-deploy-123456"


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}: required when CI=true")
    pytest.skip(what)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """Debian's Chromium, headless, as in the browser suite."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _missing(f"Chromium is not installed at {CHROMIUM}")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS, "headless": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """One long-running process of the topology: started, stopped with SIGTERM, restarted."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], home: Path, url: str = "") -> None:
        self.name, self.argv, self.env, self.url = name, argv, env, url
        self.log = home / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        """Start it; a web process must answer its login page before this returns."""
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        self.starts += 1
        if self.url:
            self._wait_http(f"{self.url}/login/")

    def stop(self) -> None:
        """SIGTERM, as systemd stops a unit; killed after 20 s."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.popen = None

    def restart(self) -> None:
        """Stop, then start again (same port, same settings)."""
        self.stop()
        self.start()

    @property
    def pid(self) -> int:
        """The running process's id."""
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        """Still running."""
        return self.popen is not None and self.popen.poll() is None

    def _wait_http(self, url: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not answer at {url}:\n{self.log.read_text()}")


class Topology:
    """Every process, the settings they share, and a way to run one-off commands."""

    def __init__(self, env: dict[str, str], home: Path, database_url: str) -> None:
        self.env, self.home, self.database_url = env, home, database_url
        python = sys.executable
        self.web: list[Process] = []
        for n in (1, 2):
            port = _free_port()
            argv = [python, "-m", "keelgate_site.web_process", "--proxy-headers", "-b", "127.0.0.1"]
            argv += ["-p", str(port), "keelgate_site.asgi:application"]
            web_env = {**env, "KEELGATE_DB_POOL": "8"}  # the web unit's Environment= line
            self.web.append(Process(f"daphne-{n}", argv, web_env, home, url=f"http://127.0.0.1:{port}"))
        self.workers = [
            Process(
                f"worker-{n}", [python, "manage.py", "keelgate_worker", "--poll-seconds", "0.2"], env, home
            )
            for n in (1, 2)
        ]
        self.notify = Process("notify", [python, "manage.py", "keelgate_notify", "--poll", "0.5"], env, home)
        self.sequencer = Process("sequencer", [python, "manage.py", "keelgate_sequencer"], env, home)

    @property
    def processes(self) -> list[Process]:
        """Web first, then the workers, the notifier and the audit log's sequencer."""
        return [*self.web, *self.workers, self.notify, self.sequencer]

    def manage(self, *args: str) -> str:
        """``manage.py`` with the topology's settings; its stdout."""
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of one query on the topology's database."""
        import psycopg

        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())


def _admin(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
        conn.execute(statement)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, browser_type_launch_args: Any) -> Iterator[Topology]:
    """A scratch database, a flushed Redis database, migrate, the demo, then every process."""
    try:
        _admin(PG_URL, "SELECT 1")
    except Exception as exc:
        _missing(f"PostgreSQL is not reachable at {PG_URL} ({exc.__class__.__name__})")
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).flushdb()
    except Exception as exc:
        _missing(f"Redis is not reachable at {REDIS_URL} ({exc.__class__.__name__})")
    name = f"keelgate_deploy_{os.getpid()}"
    database_url = PG_URL.rsplit("/", 1)[0] + f"/{name}"
    _admin(PG_URL, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _admin(PG_URL, f"CREATE DATABASE {name}")
    home = tmp_path_factory.mktemp("keelgate-deploy")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEELGATE_", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    env.update(
        {
            # docs/deploy.md's settings; TLS is the proxy's job, so no redirect on this plain port.
            "KEELGATE_DEBUG": "0",
            "KEELGATE_SECRET_KEY": secrets.token_urlsafe(48),
            "KEELGATE_AUDIT_SIGNING_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
            "KEELGATE_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "KEELGATE_SSL_REDIRECT": "0",
            "DATABASE_URL": database_url,
            "REDIS_URL": REDIS_URL,
            "KEELGATE_VAR_DIR": str(home / "var"),
            "KEELGATE_PAPER_BROKERAGE": str(home / "brokerage.sqlite3"),
            "KEELGATE_LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "keelgate_site.settings",
            "PYTHONUNBUFFERED": "1",
        }
    )
    world = Topology(env, home, database_url)
    try:
        world.manage("migrate", "--no-input", "-v", "0")
        world.manage("keelgate_demo", "--password", PASSWORD)
        for process in world.processes:
            process.start()
        yield world
    finally:
        for process in world.processes:
            process.stop()
        ARTIFACTS.mkdir(exist_ok=True)
        for process in world.processes:
            if process.log.exists():
                (ARTIFACTS / f"deploy-{process.log.name}").write_bytes(process.log.read_bytes())
        (ARTIFACTS / "deploy-topology.json").write_text(
            json.dumps({p.name: {"starts": p.starts, "argv": p.argv[1:]} for p in world.processes}, indent=2)
        )
        _admin(PG_URL, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
