"""PostgreSQL for the benchmarks: a scratch database, Django pointed at it, and teardown.

``BENCH_PG_URL`` (default ``postgres://postgres@127.0.0.1:5432/test``) is only used to
create and drop ``keelgate_bench`` beside it; everything is measured in that scratch
database, so other people's test databases on the same server are never touched.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench._common import SCRATCH, progress

DB_NAME = os.environ.get("BENCH_PG_DB", "keelgate_bench")
"""``BENCH_PG_DB`` names another one: two benchmark runs on one server drop each other's."""
ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/test")

_state: dict[str, object] = {}


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


BENCH_URL = _with_db(ADMIN_URL, DB_NAME)


def reachable() -> str | None:
    """None if PostgreSQL answers at ``ADMIN_URL``, else why not."""
    if "reachable" not in _state:
        try:
            import psycopg

            psycopg.connect(ADMIN_URL, connect_timeout=3).close()
            _state["reachable"] = None
        except Exception as exc:
            _state["reachable"] = f"PostgreSQL not reachable at {ADMIN_URL} ({type(exc).__name__})"
    return _state["reachable"]  # type: ignore[return-value]


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def scratch_dir() -> Path:
    """Files of the Django side (brokerage, var dir), removed at teardown."""
    path = SCRATCH / f"django-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def django_env() -> dict[str, str]:
    """The environment a Django process (this one, a worker, Daphne) runs the benchmark with.

    Production settings (``KEELGATE_DEBUG=0``): with DEBUG on, Django records every query
    in memory, which is not what a deployment pays. The secret and signing keys are made
    once per benchmark process and shared with the processes it starts (sessions made
    here must verify in Daphne). The API rate limit is off, or the load generator would
    measure 429s.
    """
    import base64
    import secrets

    root = scratch_dir()
    if "keys" not in _state:
        _state["keys"] = (secrets.token_urlsafe(48), base64.b64encode(secrets.token_bytes(32)).decode())
    secret, signing = _state["keys"]  # type: ignore[misc]
    return {
        "KEELGATE_DEBUG": "0",
        "KEELGATE_SECRET_KEY": secret,
        "KEELGATE_AUDIT_SIGNING_KEY": signing,
        "KEELGATE_SSL_REDIRECT": "0",
        "KEELGATE_API_RATE_LIMIT": "0",
        "DATABASE_URL": BENCH_URL,
        "DJANGO_SETTINGS_MODULE": "keelgate_site.settings",
        "KEELGATE_VAR_DIR": str(root / "var"),
        "KEELGATE_PAPER_BROKERAGE": str(root / "brokerage.sqlite3"),
        "KEELGATE_LOG_LEVEL": "WARNING",
        "DJANGO_ALLOW_ASYNC_UNSAFE": "true",
        "PYTHONUNBUFFERED": "1",
    }


def setup_django() -> None:
    """Create ``keelgate_bench`` afresh, point Django at it and migrate (once per process)."""
    if _state.get("django"):
        return
    why = reachable()
    if why:
        raise RuntimeError(why)
    _admin(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    _admin(f"CREATE DATABASE {DB_NAME}")
    _state["created"] = True
    os.environ.update(django_env())
    import django
    from django.core.management import call_command

    django.setup()
    progress(f"PostgreSQL: created {DB_NAME}, migrating")
    call_command("migrate", interactive=False, verbosity=0)
    _state["django"] = True


_teardowns: list[object] = []


def on_teardown(fn: object) -> None:
    """Call ``fn()`` at teardown, before the database is dropped (servers, processes)."""
    _teardowns.append(fn)


def teardown() -> None:
    """Close Django's connections, drop the scratch database, remove scratch files."""
    while _teardowns:
        fn = _teardowns.pop()
        try:
            fn()  # type: ignore[operator]
        except Exception as exc:
            progress(f"teardown: {exc}")
    if _state.get("django"):
        from django.db import connections

        connections.close_all()
    if _state.get("created"):
        try:
            _admin(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
            progress(f"PostgreSQL: dropped {DB_NAME}")
        except Exception as exc:
            progress(f"PostgreSQL: could not drop {DB_NAME}: {exc}")
    shutil.rmtree(SCRATCH / f"django-{os.getpid()}", ignore_errors=True)


def maintain() -> None:
    """``VACUUM (ANALYZE)`` the benchmark database if the server's autovacuum is off (untimed).

    A deployment runs autovacuum; this machine's PostgreSQL was configured without it.
    Then nothing removes dead row versions or gathers statistics: by bench 3's third round
    ``runs_run`` held 14,000 dead versions of 2,000 rows, every lookup walked them, and the
    rounds slowed from 37 to 10 runs/s; plans were chosen for tables believed empty (a
    ``GET /runs`` page sorted the tenant's every run). The benchmarks do autovacuum's work
    between rounds instead, and say so once.
    """
    import psycopg

    with psycopg.connect(BENCH_URL, autocommit=True) as conn:
        if _state.get("autovacuum") is None:
            _state["autovacuum"] = conn.execute("SHOW autovacuum").fetchone()[0] == "on"  # type: ignore[index]
            if not _state["autovacuum"]:
                progress("PostgreSQL: autovacuum is off on this server: VACUUM (ANALYZE) between rounds")
        if not _state["autovacuum"]:
            conn.execute("VACUUM (ANALYZE)")


def xact_commits() -> int:
    """Committed transactions of ``keelgate_bench`` so far, as the statistics collector has them.

    Read from another database so the reading itself is not counted. Backends report on
    exit and at most once a second while busy, so callers close their connections first.
    """
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (DB_NAME,)
        ).fetchone()
    return int(row[0]) if row else 0
