"""The product's own server in child processes: ``keelgate_serve``, or Daphne on a shared socket.

Shared by the tests that start real web processes (``tests/site/tenants/test_web_processes.py``,
``tests/site/observability/test_access_log.py``, ``tests/site/api/test_db_pool.py``,
``tests/site/api/test_audit_tiles.py``): the environment they run in (their own SQLite file
under ``tmp_path``), the JSON 404 that says a process answers, and stopping them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from keelgate_site.management.commands.keelgate_serve import daphne_on_socket, listening_socket

ROOT = Path(__file__).resolve().parents[2]


def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without its database or settings: a new SQLite file under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEELGATE_") and k != "DATABASE_URL"}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.update(
        {
            "KEELGATE_VAR_DIR": str(tmp_path),
            "KEELGATE_PAPER_BROKERAGE": str(tmp_path / "brokerage.sqlite3"),
            "KEELGATE_LOG_LEVEL": "WARNING",
        }
    )
    env.update(extra)
    return env


def status(port: int, timeout: float = 5) -> int:
    """The status of a GET of an unknown API path on a new connection (the JSON 404)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/no-such-path", timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process (woken first if stopped), then wait; kill one that will not end."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def free_port() -> int:
    """A port nothing listens on now."""
    probe = listening_socket("127.0.0.1", 0)
    port = int(probe.getsockname()[1])
    probe.close()
    return port


@contextmanager
def keelgate_serve(
    env: dict[str, str],
    *args: str,
    stdout: int | IO[bytes] = subprocess.PIPE,
    stderr: int | IO[bytes] = subprocess.STDOUT,
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``manage.py keelgate_serve --port <free> *args``, once it answers; killed if still up after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "keelgate_serve", "--port", str(port), *args],
        cwd=ROOT,
        env=env,
        stdout=stdout,
        stderr=stderr,
    )
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:] if proc.stdout else ""
            try:
                if status(port, timeout=2) == 404:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.5)
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextmanager
def daphne(env: dict[str, str], log: Path) -> Iterator[int]:
    """One Daphne process serving the site on a free port, its output in ``log``; yields the
    port once it listens, and stops it (SIGTERM, then a kill) when the block ends."""
    sock = listening_socket("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    with log.open("ab") as out:
        (proc,) = daphne_on_socket(sock, 1, env=env, extra=["-v", "1"], stdout=out, stderr=out, cwd=ROOT)
    try:
        deadline = time.monotonic() + 90
        while "Listening on" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        yield port
    finally:
        stop([proc])
        sock.close()
