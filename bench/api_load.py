"""Throughput of ``GET /api/v1/runs`` under a local load generator, against Daphne.

    .venv/bin/python bench/api_load.py                      # PostgreSQL, wrk if installed
    .venv/bin/python bench/api_load.py --db sqlite --tool python --duration 10

Sets up a scratch database (PostgreSQL ``keelgate_api_load`` beside ``BENCH_PG_URL``,
dropped at the end; or a SQLite file in a temporary folder), migrates it, seeds a
tenant with ``--runs`` runs and an API key (made by ``create_api_key``), starts one
Daphne process with production settings (``KEELGATE_DEBUG=0``) and the rate limit off,
then loads ``GET /api/v1/runs?limit=N`` with ``wrk`` (``apt-get install wrk``) or, with
``--tool python``, an asyncio + httpx generator of the same shape (``--connections``
concurrent keep-alive connections for ``--duration`` seconds). Prints requests/s and
p50/p99 latency, and the exact load command. Only loopback is ever addressed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/test")
PG_DB = "keelgate_api_load"

SEED = """
from django.contrib.auth import get_user_model
from runs.services import run_start
user = get_user_model().objects.get(username="bench")
for n in range({runs}):
    goal, run_id = f"buy {{n + 1}} ACME", f"run-{{n:05d}}"
    run_start(tenant_id="bench", agent="paper-trader", goal=goal, user=user, run_id=run_id)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _environment(db: str, scratch: Path) -> dict[str, str]:
    if db == "postgres":
        parts = urlsplit(PG_ADMIN_URL)
        url = urlunsplit((parts.scheme, parts.netloc, f"/{PG_DB}", "", ""))
    else:
        url = f"sqlite:///{scratch / 'keelgate.sqlite3'}"
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "keelgate_site.settings",
            "KEELGATE_VAR_DIR": str(scratch),
            "KEELGATE_PAPER_BROKERAGE": str(scratch / "brokerage.sqlite3"),
            "KEELGATE_DEBUG": "0",
            "KEELGATE_SECRET_KEY": "bench-only-secret-key-0123456789abcdef0123456789abcdef",
            "KEELGATE_AUDIT_SIGNING_KEY": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "KEELGATE_SSL_REDIRECT": "0",
            "KEELGATE_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "KEELGATE_API_RATE_LIMIT": "0",
            "KEELGATE_LOG_LEVEL": "WARNING",
        }
    )
    env.pop("REDIS_URL", None)
    return env


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait(url: str, proc: subprocess.Popen[bytes], key: str) -> None:
    deadline = time.monotonic() + 60
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("daphne exited")
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} never answered")


def _run_wrk(url: str, key: str, args: argparse.Namespace) -> tuple[str, float, float, float]:
    command = [
        "wrk",
        f"-t{args.threads}",
        f"-c{args.connections}",
        f"-d{args.duration}s",
        "--latency",
        "-H",
        f"Authorization: Bearer {key}",
        url,
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    print(out)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _wrk_ms(re.search(r"\s50%\s+([\d.]+\w+)", out).group(1))  # type: ignore[union-attr]
    p99 = _wrk_ms(re.search(r"\s99%\s+([\d.]+\w+)", out).group(1))  # type: ignore[union-attr]
    shown = (
        " ".join(command)
        .replace(key, "$KEY")
        .replace("Authorization: Bearer $KEY", "'Authorization: Bearer $KEY'")
    )
    return shown, rps, p50, p99


def _wrk_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def _run_python(url: str, key: str, args: argparse.Namespace) -> tuple[str, float, float, float]:
    import httpx

    latencies: list[float] = []
    errors = 0

    async def one_connection(client: httpx.AsyncClient, stop_at: float) -> None:
        nonlocal errors
        while time.perf_counter() < stop_at:
            began = time.perf_counter()
            response = await client.get(url)
            latencies.append((time.perf_counter() - began) * 1000)
            errors += response.status_code != 200

    async def main() -> float:
        limits = httpx.Limits(max_connections=args.connections, max_keepalive_connections=args.connections)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=headers, limits=limits, timeout=30) as client:
            began = time.perf_counter()
            stop_at = began + args.duration
            await asyncio.gather(*(one_connection(client, stop_at) for _ in range(args.connections)))
            return time.perf_counter() - began

    elapsed = asyncio.run(main())
    if errors:
        print(f"{errors} responses were not 200")
    cuts = statistics.quantiles(latencies, n=100)
    shown = f"python bench/api_load.py --tool python -c {args.connections} -d {args.duration}  ({url})"
    return shown, len(latencies) / elapsed, cuts[49], cuts[98]


def main() -> None:
    """Set up, load, report, tear down."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument(
        "--tool", choices=["wrk", "python"], default="wrk" if shutil.which("wrk") else "python"
    )
    parser.add_argument("--runs", type=int, default=200, help="runs seeded in the tenant")
    parser.add_argument("--limit", type=int, default=50, help="page size of GET /runs")
    parser.add_argument("-d", "--duration", type=int, default=20, help="seconds of load")
    parser.add_argument("-c", "--connections", type=int, default=16)
    parser.add_argument("-t", "--threads", type=int, default=2, help="wrk threads")
    parser.add_argument(
        "--conn-max-age",
        type=int,
        default=None,
        help="override CONN_MAX_AGE (the site opens a new database connection per request: 0)",
    )
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="keelgate-api-load-"))
    env = _environment(args.db, scratch)
    if args.conn_max_age is not None:
        # A settings module of the benchmark's own, so the site's settings stay untouched.
        (scratch / "bench_settings.py").write_text(
            "from keelgate_site.settings import *  # noqa: F403\n"
            f"DATABASES['default']['CONN_MAX_AGE'] = {args.conn_max_age}  # noqa: F405\n"
        )
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(scratch), str(ROOT), env.get("PYTHONPATH", "")])
        )
        env["DJANGO_SETTINGS_MODULE"] = "bench_settings"
    if args.db == "postgres":
        _pg_admin(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        _pg_admin(f"CREATE DATABASE {PG_DB}")
    server: subprocess.Popen[bytes] | None = None
    try:
        _manage(env, "migrate", "--verbosity", "0")
        _manage(env, "keelgate_tenant", "bench")
        _manage(
            env,
            "keelgate_operator",
            "bench",
            "--tenant",
            "bench",
            "--role",
            "admin",
            "--password",
            "pw-bench-1",
        )
        _manage(env, "shell", "-c", SEED.format(runs=args.runs))
        key = _manage(env, "create_api_key", "--tenant", "bench", "--user", "bench").strip().splitlines()[-1]
        port = _free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "keelgate_site.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/api/v1/runs?limit={args.limit}"
        _wait(url, server, key)
        # Warm up: connections, Django's caches, PostgreSQL's buffers.
        for _ in range(50):
            urllib.request.urlopen(
                urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
            ).read()
        cpu_before = _cpu_seconds(server.pid)
        shown, rps, p50, p99 = (_run_wrk if args.tool == "wrk" else _run_python)(url, key, args)
        cpu_after = _cpu_seconds(server.pid)
        age = "site default" if args.conn_max_age is None else args.conn_max_age
        print(f"database:    {args.db}, {args.runs} runs, {args.limit} per page, CONN_MAX_AGE {age}")
        print(f"load:        {shown}")
        print(f"throughput:  {rps:.0f} requests/s")
        print(f"latency:     p50 {p50:.1f} ms, p99 {p99:.1f} ms")
        served = rps * args.duration
        print(
            f"server CPU:  {(cpu_after - cpu_before) * 1000 / served:.1f} ms per request (Daphne's user"
            f" + system time; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if args.db == "postgres":
            _pg_admin(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
