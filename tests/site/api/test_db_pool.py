"""Daphne with ``KEELGATE_DB_POOL`` (PostgreSQL): bounded connections, and none handed out dead.

The web process runs each request's sync code in a thread of its own; the pool is what
lets those threads share a few connections. Here a real Daphne serves the test
database with a pool of 2: more concurrent requests than connections all succeed, the
server never holds more than 2, and after PostgreSQL kills them (a restart, a failover)
the next requests still succeed, because a borrowed connection is checked first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from tests.site._serve import daphne
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


def _dsn() -> str:
    """The test database's URL, for another process or a connection of its own."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit((parts.scheme, parts.netloc, "/" + connection.settings_dict["NAME"], "", ""))


def _backends(app: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [app])
        return int(cursor.fetchone()[0])


def test_a_pooled_daphne_bounds_its_connections_and_survives_their_death(keys, tmp_path):
    """12 concurrent GET /runs on a pool of 2 are all 200 with at most 2 server sessions;
    after pg_terminate_backend of those sessions every request is still 200."""
    require_postgres("the psycopg pool")
    app = f"kg-pool-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEELGATE_")}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.update(
        {
            "DATABASE_URL": _dsn(),
            "PGAPPNAME": app,  # libpq's default application_name: these sessions, and no others
            "KEELGATE_DB_POOL": "2",
            "KEELGATE_VAR_DIR": str(tmp_path),
            "KEELGATE_API_RATE_LIMIT": "0",
            "KEELGATE_LOG_LEVEL": "WARNING",
        }
    )
    log = tmp_path / "daphne.log"
    with daphne(env, log) as port:
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


def test_a_quiet_pooled_connection_is_lent_without_a_round_trip(db, tmp_path):
    """``check_pooled`` on a healthy idle connection sends nothing (libpq's own trace is
    empty); Django's check, the pool's ``check_connection``, makes a round trip."""
    require_postgres("the psycopg pool's check")
    import psycopg
    from psycopg_pool import ConnectionPool

    from sitekit.postgresql.base import check_pooled

    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute("SELECT 1")
        for check, sent in ((check_pooled, False), (ConnectionPool.check_connection, True)):
            trace = tmp_path / f"{check.__name__}.trace"
            with trace.open("w") as out:
                conn.pgconn.trace(out.fileno())
                check(conn)
                conn.pgconn.untrace()
            assert ("\tF\t" in trace.read_text()) is sent, trace.read_text()


def test_a_pooled_connection_the_server_ended_fails_the_check(db):
    """Terminated by the server (``pg_terminate_backend``, as a restart does) or closed by
    the client, the connection fails ``check_pooled``, so the pool lends another."""
    require_postgres("the psycopg pool's check")
    import psycopg

    from sitekit.postgresql.base import check_pooled

    conn = psycopg.connect(_dsn(), autocommit=True)
    try:
        pid = conn.info.backend_pid
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 10
        while True:  # the backend's goodbye reaches the socket
            try:
                check_pooled(conn)
            except psycopg.OperationalError:
                break
            assert time.monotonic() < deadline, "a terminated connection passed the check"
            time.sleep(0.05)
    finally:
        conn.close()
    with pytest.raises(psycopg.OperationalError):
        check_pooled(conn)


_LEND_TWICE = """
import os, tempfile
import django
django.setup()
from django.db import connections
connection = connections["default"]
connection.ensure_connection()
pg = connection.connection.pgconn
with tempfile.TemporaryFile("w+") as trace:
    pg.trace(trace.fileno())
    connection.close()  # back to the pool
    connection.ensure_connection()  # lent again, checked on the way
    assert connection.connection.pgconn is pg  # a pool of one
    pg.untrace()
    trace.seek(0)
    print(connection.vendor, type(connection).__module__, sum("\\tF\\t" in line for line in trace))
"""


def test_the_site_pool_lends_a_connection_again_without_a_round_trip(db):
    """With ``KEELGATE_DB_POOL``, a connection given back and lent again sends nothing on
    the way (the settings' backend, ``sitekit.postgresql``): Django's own check sent a query."""
    require_postgres("the psycopg pool")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEELGATE_")}
    env.update(
        {"DATABASE_URL": _dsn(), "KEELGATE_DB_POOL": "1", "DJANGO_SETTINGS_MODULE": "keelgate_site.settings"}
    )
    out = subprocess.run(
        [sys.executable, "-c", _LEND_TWICE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["postgresql", "sitekit.postgresql.base", "0"], out.stderr[-2000:]
