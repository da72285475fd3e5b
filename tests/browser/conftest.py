"""The browser suite's world: a fresh database, Daphne and a worker in their own processes.

Run it on its own (``pytest tests/browser``): the default run ignores this folder. It
drives Debian's Chromium (``/usr/bin/chromium``) through pytest-playwright; when
``CI=true`` a missing browser fails the run instead of skipping it.
"""

from __future__ import annotations

import json
import os
import shutil
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

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("KEELGATE_CHROMIUM", "/usr/bin/chromium")
PASSWORD = "pw-browser-123456"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright launches Debian's Chromium, headless, with no network of its own."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: required when CI=true")
        pytest.skip(message)
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS, "headless": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Control:
    """Talks to ``tests/browser/control.py``: one JSON command in, one JSON answer out."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.browser.control"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def __call__(self, op: str, **args: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the control process died")
        answer = json.loads(line)
        if not answer["ok"]:
            raise RuntimeError(f"{op} failed: {answer['error']}\n{answer.get('trace', '')}")
        return answer["value"]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Server:
    """The running product: its URL, its control hand, its Daphne process (restartable)."""

    def __init__(self, url: str, port: int, env: dict[str, str], control: Control, home: Path) -> None:
        self.url = url
        self.port = port
        self.env = env
        self.control = control
        self.home = home
        self.daphne: subprocess.Popen[bytes] | None = None
        self.daphne_log = home / "daphne.log"

    def start_daphne(self) -> None:
        """Start Daphne on the server's port and wait until it answers."""
        with open(self.daphne_log, "ab") as out:
            self.daphne = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "keelgate_site.web_process",  # Daphne as the product runs it: its access log redacted
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "keelgate_site.asgi:application",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_http(f"{self.url}/login/", self.daphne, self.daphne_log)

    def stop_daphne(self) -> None:
        """Stop Daphne as a deployment would (SIGTERM)."""
        if self.daphne is not None:
            _stop(self.daphne)
            self.daphne = None


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer at {url}:\n{log.read_text()}")


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, browser_type_launch_args: dict[str, Any]
) -> Iterator[Server]:
    """Migrate a fresh SQLite file, seed people, start Daphne and a worker; stop both after."""
    home = tmp_path_factory.mktemp("keelgate-browser")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.browser.settings",
            "DATABASE_URL": f"sqlite:///{home / 'console.sqlite3'}",
            "KEELGATE_VAR_DIR": str(home),
            "KEELGATE_PAPER_BROKERAGE": str(home / "brokerage.sqlite3"),
            "KEELGATE_LOG_LEVEL": "WARNING",
            # The webhook tests' receivers listen on this host: the SSRF guard lets loopback alone through.
            "KEELGATE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "PYTHONUNBUFFERED": "1",
        }
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    control = Control(env)
    control("seed", password=PASSWORD)
    port = _free_port()
    server = Server(f"http://127.0.0.1:{port}", port, env, control, home)
    worker_log = home / "worker.log"
    with open(worker_log, "wb") as worker_out:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "keelgate_worker", "--poll-seconds", "0.1"],
            cwd=ROOT,
            env=env,
            stdout=worker_out,
            stderr=subprocess.STDOUT,
        )
        try:
            server.start_daphne()
            yield server
        finally:
            _stop(worker)
            server.stop_daphne()
            control.close()
            ARTIFACTS.mkdir(exist_ok=True)
            for log in (server.daphne_log, worker_log):
                if log.exists():
                    shutil.copy(log, ARTIFACTS / f"browser-{log.name}")
            _no_secret_in(server.daphne_log, worker_log)


def _no_secret_in(*logs: Path) -> None:
    """After the whole suite (people logged in, keys made, decision links opened): no line of
    the web or the worker process holds a password or anything shaped like a credential."""
    from sitekit.logs import redact_text

    for log in logs:
        for number, line in enumerate(log.read_text(errors="replace").splitlines(), 1):
            assert PASSWORD not in line and redact_text(line) == line, f"{log.name}:{number}: {line[:300]}"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """``test-artifacts/`` at the repository root (gitignored): screenshots and figures."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
