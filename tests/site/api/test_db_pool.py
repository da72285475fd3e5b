"""Daphne with ``KEELGATE_DB_POOL`` (PostgreSQL): bounded connections, and none handed out dead.

The web process runs each request's sync code in a thread of its own; the pool is what
lets those threads share a few connections. Here a real Daphne serves the test
database with a pool of 2: more concurrent requests than connections all succeed, the
server never holds more than 2, and after PostgreSQL kills them (a restart, a failover)
the next requests still succeed, because a borrowed connection is checked first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.db import connection

from keelgate_site.management.commands.keelgate_serve import daphne_on_socket, listening_socket
from tests.site.runs._batch import require_postgres

ROOT = Path(__file__).resolve().parents[3]


def _get(port: int, key: str) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/runs", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _backends(app: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [app])
        return int(cursor.fetchone()[0])


def test_a_pooled_daphne_bounds_its_connections_and_survives_their_death(keys, tmp_path):
    """12 concurrent GET /runs on a pool of 2 are all 200 with at most 2 server sessions;
    after pg_terminate_backend of those sessions every request is still 200."""
    require_postgres("the psycopg pool")
    app = f"kg-pool-{uuid.uuid4().hex[:8]}"
    parts = urlsplit(os.environ["DATABASE_URL"])
    url = urlunsplit((parts.scheme, parts.netloc, "/" + connection.settings_dict["NAME"], "", ""))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEELGATE_")}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.update(
        {
            "DATABASE_URL": url,
            "PGAPPNAME": app,  # libpq's default application_name: these sessions, and no others
            "KEELGATE_DB_POOL": "2",
            "KEELGATE_VAR_DIR": str(tmp_path),
            "KEELGATE_API_RATE_LIMIT": "0",
            "KEELGATE_LOG_LEVEL": "WARNING",
        }
    )
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    log = tmp_path / "daphne.log"
    with log.open("ab") as out:
        (proc,) = daphne_on_socket(sock, 1, env=env, extra=["-v", "1"], stdout=out, stderr=out, cwd=ROOT)
    try:
        deadline = time.monotonic() + 90
        while "Listening on" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        with ThreadPoolExecutor(max_workers=12) as threads:
            assert list(threads.map(lambda _: _get(port, keys.t1), range(24))) == [200] * 24
            assert 1 <= _backends(app) <= 2
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %s) AS killed",
                    [app],
                )
                assert cursor.fetchone()[0] >= 1
            time.sleep(0.5)
            assert list(threads.map(lambda _: _get(port, keys.t1), range(24))) == [200] * 24
        assert _backends(app) <= 2
        assert '"ERROR"' not in log.read_text(errors="replace")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sock.close()
