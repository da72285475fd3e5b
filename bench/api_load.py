"""6. API throughput: req/s and p99 of the REST API under load, against the same server's floor.

    QUICK=1 .venv/bin/python -m bench --only 6          # as part of the table
    .venv/bin/python -m bench.api_load --topologies 1,1+pool,1+cache,1+pool+cache --duration 5

For each topology (``BENCH_API_TOPOLOGIES``, default ``1,1+pool+cache,2+pool+cache``)
the same three loads run interleaved over rounds, each for a fixed time on 16 keep-alive
connections (``BENCH_API_CONNECTIONS``, as the issue's table). A topology is a number of
Daphne processes sharing one listening socket, as ``keelgate_serve --web-processes N``
starts them, and flags: ``pool`` (``KEELGATE_DB_POOL=8``; without it a PostgreSQL
session per request), ``cache`` (``KEELGATE_API_KEY_CACHE_SECONDS=1``, the default; without it a key
lookup per request), ``redis`` (Redis for the cache and the channel layer, as several
processes are deployed, and the API rate limit counting every request; ``BENCH_REDIS_URL``,
default database 13 on localhost). ``1`` is the site as it was configured before.

- ``GET /api/v1/runs`` (a page of 50) with an API key;
- ``POST /api/v1/approvals/{id}/approve`` with an API key, a different waiting approval
  per request (copies of one real waiting run, made beforehand: see
  :func:`_waiting_approvals`);
- the floor: ``GET`` of an unknown ``/api/v1/`` path, the server's JSON 404 (middleware,
  routing and the error handler; no database).

The load generator is ``wrk`` when it is on ``PATH`` (``apt-get install wrk``; a Lua
script gives each approve request its own id), else an asyncio HTTP/1.1 generator of
the same shape, which itself takes a good part of a core on a small machine. Every
row reports its ratio to the floor of the same server measured in the same rounds, p50
and p99 (medians over rounds, and the worst round), the server processes' CPU per
request (with several processes, the busiest one's share of it), and any status other
than the expected one (200; 404 for the floor; not counted in the rate), with the first
errors the server logged. Django runs with production settings
(``KEELGATE_DEBUG=0``), the in-memory channel layer and cache unless ``redis``, and
the API rate limit off unless ``redis``; ``BENCH_API_ENV`` (``NAME=value,...``) adds
settings to the server processes. Only loopback is ever addressed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _pg
from bench._common import Row, interleave, median, progress, quick

BENCH = "6. API throughput"
MAX_RATE = 500
"""Approve requests per second one round can use at most: that many waiting approvals are made.
A round that uses them up answers 409 from then on, which the rates do not count."""


DEFAULT = "1,1+pool+cache,2+pool+cache"
POOL_SIZE = "8"
"""``KEELGATE_DB_POOL`` of a ``+pool`` topology, as ``keelgate_serve`` gives its web processes."""
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
"""Redis of a ``+redis`` topology (``BENCH_REDIS_URL``)."""
CACHE_SECONDS = "1"
"""``KEELGATE_API_KEY_CACHE_SECONDS`` of a ``+cache`` topology (the site's default)."""


def _topology(text: str) -> tuple[int, dict[str, str]]:
    """``"2+pool+cache"``: two Daphne processes, each with a connection pool and the key cache;
    ``"1"``: one, a new database connection per request and a key lookup per request."""
    n, *flags = text.split("+")
    threads = [f for f in flags if re.fullmatch(r"t[1-9][0-9]*", f)]
    unknown = set(flags) - {"pool", "cache", "redis", *threads}
    if unknown or len(threads) > 1:
        raise ValueError(f"unknown topology flags {sorted(unknown)} in {text!r}")
    env = {
        "KEELGATE_DB_POOL": POOL_SIZE if "pool" in flags else "0",
        "KEELGATE_API_KEY_CACHE_SECONDS": CACHE_SECONDS if "cache" in flags else "0",
        "KEELGATE_WEB_THREADS": threads[0][1:] if threads else "0",
    }
    if "redis" in flags:
        # As deployed with several processes: Redis for the cache and the channel layer, and
        # the rate limit counting every request (too high to refuse one).
        env.update({"REDIS_URL": REDIS_URL, "KEELGATE_API_RATE_LIMIT": "1000000000"})
    return int(n), env


def _cached(topology: str) -> bool:
    return _topology(topology)[1]["KEELGATE_API_KEY_CACHE_SECONDS"] != "0"


def _title(topology: str) -> str:
    n, env = _topology(topology)
    pool = f"pool of {env['KEELGATE_DB_POOL']}" if env["KEELGATE_DB_POOL"] != "0" else "no pool"
    cache = "key cache" if env["KEELGATE_API_KEY_CACHE_SECONDS"] != "0" else "no key cache"
    redis = ", Redis + rate limit" if "REDIS_URL" in env else ""
    threads = f", {env['KEELGATE_WEB_THREADS']} threads" if env["KEELGATE_WEB_THREADS"] != "0" else ""
    return f"{n} Daphne, {pool}, {cache}{redis}{threads}"


def _options() -> dict[str, Any]:
    return {
        "topologies": [
            t.strip() for t in os.environ.get("BENCH_API_TOPOLOGIES", DEFAULT).split(",") if t.strip()
        ],
        "tool": os.environ.get("BENCH_API_TOOL") or ("wrk" if shutil.which("wrk") else "python"),
        "duration": float(os.environ.get("BENCH_API_DURATION") or (2 if quick() else 5)),
        "connections": int(os.environ.get("BENCH_API_CONNECTIONS") or 16),
        "rounds": int(os.environ.get("BENCH_API_ROUNDS") or (3 if quick() else 5)),
        "env": dict(
            item.split("=", 1) for item in os.environ.get("BENCH_API_ENV", "").split(",") if "=" in item
        ),
    }


# -- the servers ----------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Servers:
    """``n`` Daphne processes on one listening socket, as ``keelgate_serve --web-processes n``."""

    def __init__(self, n: int, extra_env: dict[str, str]) -> None:
        from keelgate_site.management.commands.keelgate_serve import daphne_on_socket, listening_socket

        self.n = n
        self.sock = listening_socket("127.0.0.1", 0)
        self.port = int(self.sock.getsockname()[1])
        env = {**os.environ, **_pg.django_env(), **extra_env}
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the web server keeps Django's guard
        self.log = _pg.scratch_dir() / f"daphne-{n}.log"
        self._out = self.log.open("ab")
        self.procs = daphne_on_socket(
            self.sock,
            n,
            env=env,
            extra=["-v", "1", "--access-log", os.devnull],
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        _pg.on_teardown(self.stop)
        deadline = time.monotonic() + 120
        # Each process logs "Listening on" once it accepts; until then the others take all.
        while self.log.read_text(errors="replace").count("Listening on") < n:
            if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Daphne did not start: {self.log.read_text()[-800:]}")
            time.sleep(0.1)
        # The first request loads the URL map and the API (seconds on a loaded machine).
        with contextlib.suppress(urllib.error.HTTPError):  # the JSON 404: Django answers
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/bench-ready", timeout=120)
        progress(f"{BENCH}: {n} Daphne process(es) up on port {self.port}")

    def cpu(self) -> list[float]:
        """CPU seconds used so far by each process."""
        return [_cpu_seconds(p.pid) for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.sock.close()
        self._out.close()


# -- the load generators --------------------------------------------------------------------------


_WRK_SCRIPT = """
local ids = {%(ids)s}
local threads = %(threads)d
local expected = %(expected)d
local headers = {%(headers)s}
local body = %(body)s
local method = "%(method)s"
local path = "%(path)s"
local count = 0
local all = {}

function setup(thread)
  thread:set("tid", count)
  count = count + 1
  table.insert(all, thread)
end

function init(args)
  n = tid + 1
  ok = 0
  other = 0
  codes = ""
end

function request()
  local p = path
  if #ids > 0 then
    local id = ids[n] or ids[#ids]  -- used up: an approval already decided, answered 409
    n = n + threads
    p = string.format(path, id)
  end
  return wrk.format(method, p, headers, body)
end

function response(status, hdrs, b)
  if status == expected then
    ok = ok + 1
  else
    other = other + 1
    if other <= 5 then
      codes = codes .. status .. ":" .. (string.match(b or "", '"code": *"([%%w_]+)"') or "-") .. " "
    end
  end
end

function done(summary, latency, requests)
  local o, c = 0, ""
  for _, t in ipairs(all) do
    o = o + t:get("other")
    c = c .. t:get("codes")
  end
  io.write(string.format("unexpected: %%d [%%s]\\n", o, c))
end
"""


def _lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _wrk(
    port: int,
    method: str,
    path: str,
    token: str | None,
    expected: int,
    duration: float,
    connections: int,
    scratch: Path,
    ids: list[int] | None = None,
) -> dict[str, Any]:
    """One wrk load; returns req/s, latency percentiles (ms), unexpected responses and the command."""
    threads = 2
    headers = {"Content-Type": "application/json"} if method == "POST" else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    script = scratch / f"wrk-{uuid.uuid4().hex[:8]}.lua"
    script.write_text(
        _WRK_SCRIPT
        % {
            "ids": ",".join(str(i) for i in ids or []),
            "threads": threads,
            "expected": expected,
            "headers": ", ".join(f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items()),
            "body": _lua_string(_approve_body(ids[0]).decode()) if method == "POST" and ids else "nil",
            "method": method,
            "path": path.replace("{id}", "%d"),
        }
    )
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration:g}s",
        "--latency",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}{path.replace('{id}', '1') if ids is None else ''}",
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    script.unlink()
    unexpected = re.search(r"unexpected: (\d+) \[([^\]]*)\]", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50": _wrk_ms(re.search(r"\s50%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "p99": _wrk_ms(re.search(r"\s99%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "requests": int(re.search(r"(\d+) requests in", out).group(1)),  # type: ignore[union-attr]
        "unexpected": int(unexpected.group(1)) if unexpected else 0,
        "codes": unexpected.group(2).split() if unexpected else [],
        "socket_errors": sum(int(g) for g in errors.groups()) if errors else 0,
        "command": f"wrk -t{threads} -c{connections} -d{duration:g}s --latency -s <script: {method} {path}>",
    }


def _approve_body(approval_id: int) -> bytes:
    """An approve's body, naming the call's ``arguments_hash`` as the API requires; every
    waiting copy (:func:`_waiting_approvals`) proposes the same call, so one body serves all."""
    from approvals.models import Approval

    seen = Approval.objects.values_list("arguments_hash", flat=True).get(pk=approval_id)
    return json.dumps({"note": "", "arguments_hash": seen}).encode()


def _wrk_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def _raw_request(method: str, path: str, token: str | None, approval_id: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: keep-alive"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    body = b""
    if method == "POST" and approval_id is not None:
        body = _approve_body(approval_id)
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _python_load(
    port: int, requests: list[bytes], duration: float, connections: int
) -> tuple[list[float], dict[int, int], float]:
    """Keep-alive connections sending ``requests`` in turn (the last one again once used up)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    queue = list(reversed(requests))
    deadline = time.perf_counter() + duration

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                request = queue.pop() if len(queue) > 1 else queue[0]
                t = time.perf_counter()
                writer.write(request)
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                fields = {
                    k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)
                }
                if "content-length" in fields:
                    await reader.readexactly(int(fields["content-length"]))
                elif fields.get("transfer-encoding") == "chunked":
                    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                        await reader.readexactly(size + 2)
                    await reader.readexactly(2)
                latencies.append((time.perf_counter() - t) * 1000)
                status = int(head[0].split()[1])
                statuses[status] = statuses.get(status, 0) + 1
                if fields.get("connection", "").lower() == "close":
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(connections)))
    return latencies, statuses, time.perf_counter() - start


def _python(
    port: int,
    method: str,
    path: str,
    token: str | None,
    expected: int,
    duration: float,
    connections: int,
    scratch: Path,
    ids: list[int] | None = None,
) -> dict[str, Any]:
    requests = (
        [_raw_request(method, path.replace("{id}", str(i)), token, i) for i in ids]
        if ids
        else [_raw_request(method, path, token)]
    )
    latencies, statuses, elapsed = asyncio.run(_python_load(port, requests, duration, connections))
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    other = {s: c for s, c in statuses.items() if s != expected}
    return {
        "rps": len(latencies) / elapsed,
        "p50": cuts[49],
        "p99": cuts[98],
        "requests": len(latencies),
        "unexpected": sum(other.values()),
        "codes": [str(s) for s in other],
        "socket_errors": 0,
        "command": f"asyncio HTTP/1.1 generator, {connections} connections, {duration:g}s: {method} {path}",
    }


# -- data -----------------------------------------------------------------------------------------


def _user(tenant_slug: str, username: str) -> Any:
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Role, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": tenant_slug})
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        Membership.objects.create(user=user, tenant=tenant, role=Role.ADMIN)
    return user


def _fields(row: Any) -> dict[str, Any]:
    return {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields if not f.primary_key}


def _waiting_approvals(user: Any, tenant: str, n: int) -> list[int]:
    """``n`` approvals to decide: copies of one real waiting run under new run ids (untimed).

    The Run rows are copied in bulk; each copy's checkpoint is the template's latest
    state with the new run id, saved through the checkpoint store (whatever its row
    format), whose inbox projection makes the copy's approval; deciding a copy reads and
    writes that copy only.
    """
    from django.db import connection, transaction

    from approvals.models import Approval
    from keelgate.loop import LoopState
    from runs.engine.stores import DjangoCheckpointStore
    from runs.engine.worker import Worker
    from runs.models import Run
    from runs.services import run_start

    template, _ = run_start(tenant_id=tenant, agent="paper-trader", goal="buy 10 ACME", user=user)
    Worker(poll_seconds=0.01).serve(once=True)
    gc.collect()
    run = Run.objects.get(pk=template.pk)
    state = DjangoCheckpointStore().load(tenant, run.run_id)
    if state is None:
        raise RuntimeError("the template run saved no checkpoint")
    text = state.to_json()
    made: list[int] = []
    for start in range(0, n, 500):
        ids = [uuid.uuid4().hex for _ in range(min(500, n - start))]
        with transaction.atomic():
            Run.objects.bulk_create([Run(**{**_fields(run), "run_id": rid, "seq": 0}) for rid in ids])
            store = DjangoCheckpointStore()
            for rid in ids:
                store.save(LoopState.from_json(text.replace(run.run_id, rid)))
        # The store's inbox projection made each copy's approval, as for a real run.
        made += Approval.objects.filter(tenant_id=tenant, run_id__in=ids, status="pending").values_list(
            "pk", flat=True
        )
        # Statistics as the tables grow, as autovacuum keeps them: planned on the first
        # batch's, the projection's lookup walked the whole tenant (45,000 copies took 8
        # minutes of a full pass; 4 with this).
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE runs_run, runs_checkpoint, approvals_approval")
    if len(made) != n:
        raise RuntimeError(f"{len(made)} waiting approvals made, {n} wanted")
    return made


def _analyze() -> None:
    """Statistics for the rows just made, as autovacuum keeps them for a table that grew so.

    Without them PostgreSQL believes the tenant holds ten runs, and ``GET /runs`` read and
    sorted all 4,800 for each page (a bitmap scan: 4.4 ms of the server's CPU a request,
    against 0.05 ms walking ``run_recent``): the fixture's cost, not a deployment's.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _round_trips_per_request(token: str, approval_id: int) -> dict[str, int]:
    """Round trips to PostgreSQL one request makes, in this process with Django's test client.

    Counted by libpq's own trace of each connection (``PGconn.trace``): every answer the
    server finishes with ``ReadyForQuery`` ends one round trip, whatever sent it (the ORM,
    the engine's commit groups with several statements in one message, psycopg's own
    ``BEGIN``); opening a connection is not counted.
    """
    from django.db import connection
    from django.db.backends.signals import connection_created
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")
    client.get("/api/v1/runs")  # the key's first use is written once (last_used_at)
    counts = {}
    for name, call in (
        ("runs", lambda: client.get("/api/v1/runs")),
        (
            "approve",
            lambda: client.post(
                f"/api/v1/approvals/{approval_id}/approve",
                data=_approve_body(approval_id),
                content_type="application/json",
            ),
        ),
        ("floor", lambda: client.get("/api/v1/bench-floor")),
    ):
        traces: list[tuple[Any, Any]] = []
        on_created = functools.partial(_trace_created, traces)
        if connection.connection is not None:
            _trace(traces, connection.connection.pgconn)
        connection_created.connect(on_created)
        try:
            response = call()
        finally:
            connection_created.disconnect(on_created)
        if response.status_code >= 500:
            raise RuntimeError(f"{name}: HTTP {response.status_code}")
        trips = 0
        for pg, log in traces:
            with contextlib.suppress(Exception):  # a connection closed since
                pg.untrace()
            log.seek(0)
            trips += sum(1 for line in log if "\tB\t" in line and "\tReadyForQuery" in line)
            log.close()
        counts[name] = trips
    return counts


def _trace(traces: list[tuple[Any, Any]], pg: Any) -> None:
    """libpq traces what ``pg`` sends and receives into a file kept in ``traces``."""
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115  (read and closed by the caller)
    pg.trace(log.fileno())
    traces.append((pg, log))


def _trace_created(traces: list[tuple[Any, Any]], sender: Any, connection: Any, **kwargs: Any) -> None:
    _trace(traces, connection.connection.pgconn)


# -- the benchmark --------------------------------------------------------------------------------


_LABELS = {
    "runs": "GET /api/v1/runs (page of 50), API key",
    "approve": "POST /api/v1/approvals/{id}/approve, API key",
    "floor": "floor: GET unknown /api/v1/ path (JSON 404, no database)",
}


def _measure(
    topology: str, opts: dict[str, Any], token: str, pool: list[int], scratch: Path
) -> tuple[dict[str, list[float]], dict[str, list[dict[str, Any]]]]:
    """One topology: its servers up, a warm-up, the interleaved rounds, its servers down."""
    n, topology_env = _topology(topology)
    servers = Servers(n, {**topology_env, **opts["env"]})
    load = _wrk if opts["tool"] == "wrk" else _python
    per_round = int(MAX_RATE * opts["duration"])
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in _LABELS}
    shapes = {
        "runs": ("GET", "/api/v1/runs", token, 200),
        "approve": ("POST", "/api/v1/approvals/{id}/approve", token, 200),
        "floor": ("GET", "/api/v1/bench-floor", None, 404),
    }

    def case(name: str, keep: bool = True) -> float:
        method, path, tok, expected = shapes[name]
        ids = [pool.pop() for _ in range(min(per_round, len(pool) - 1))] if name == "approve" else None
        before = servers.cpu()
        got = load(
            servers.port, method, path, tok, expected, opts["duration"], opts["connections"], scratch, ids
        )
        each = [after - b for after, b in zip(servers.cpu(), before, strict=True)]
        got["cpu"] = sum(each)
        got["busiest_share"] = max(each) / got["cpu"] if got["cpu"] > 0 else 1.0
        # Only the expected answers count: a 409 of a used-up pool, or any error, is cheap.
        got["rps"] *= (got["requests"] - got["unexpected"]) / max(1, got["requests"])
        if keep:
            results[name].append(got)
        return float(got["rps"])

    try:
        for name in shapes:  # warm-up: connections, caches, PostgreSQL's buffers
            case(name, keep=False)
        cases: dict[str, Callable[[], float]] = {name: functools.partial(case, name) for name in shapes}
        values = interleave(f"{BENCH}, {topology}", cases, rounds=opts["rounds"], between=_pg.maintain)
    finally:
        servers.stop()
    if any(g["unexpected"] for got in results.values() for g in got):
        errors = [ln for ln in servers.log.read_text(errors="replace").splitlines() if '"ERROR"' in ln]
        progress(f"{BENCH}, {topology}: unexpected responses; the server logged {len(errors)} errors")
        for line in errors[:3]:
            progress(f"  {line[:1500]}")
    return values, results


def run() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH, f"not measured: {why}", "", "", None)]
    opts = _options()
    _pg.setup_django()
    from tenants.api_keys import api_key_create
    from tenants.models import Tenant

    user = _user("api", "bench-api")
    _, token = api_key_create(by="tester", tenant=Tenant.objects.get(slug="api"), user=user, name="bench")
    needed = int(MAX_RATE * opts["duration"]) * (opts["rounds"] + 1) * len(opts["topologies"]) + 2
    pool = _waiting_approvals(user, "api", needed)
    _analyze()
    from django.test import override_settings

    trips = {}
    for cached in (False, True):
        with override_settings(KEELGATE_API_KEY_CACHE_SECONDS=float(CACHE_SECONDS) if cached else 0):
            trips[cached] = _round_trips_per_request(token, pool.pop())
    progress(
        f"{BENCH}: {len(pool)} approvals to decide; round trips per request {trips}; {opts['tool']},"
        f" {opts['connections']} connections, {opts['duration']:g}s x {opts['rounds']} rounds;"
        f" server settings added: {opts['env'] or 'none'}"
    )
    rows: list[Row] = []
    first: dict[str, float] = {}
    for topology in opts["topologies"]:
        try:
            values, results = _measure(topology, opts, token, pool, _pg.scratch_dir())
        except Exception as exc:  # one topology that breaks is a row, not the whole benchmark
            rows.append(
                Row(BENCH, f"{_title(topology)}: not measured: {type(exc).__name__}: {exc}", "", "", None)
            )
            continue
        floor = median(values["floor"])
        for name, label in _LABELS.items():
            got = results[name]
            m = median(values[name])
            requests = sum(g["requests"] for g in got)
            cpu_ms = sum(g["cpu"] for g in got) * 1000 / max(1, requests)
            unexpected = sum(g["unexpected"] + g["socket_errors"] for g in got)
            codes = sorted({c for g in got for c in g["codes"]})
            p50 = median([g["p50"] for g in got])
            p99 = median([g["p99"] for g in got])
            worst = max(g["p99"] for g in got)
            busiest = max(g["busiest_share"] for g in got)
            several = _topology(topology)[0] > 1
            split = f", {busiest:.0%} of it in the busiest process at worst" if several else ""
            first.setdefault(name, m)
            rows.append(
                Row(
                    BENCH,
                    f"{_title(topology)}: {label}",
                    "throughput",
                    "req/s",
                    m,
                    values[name],
                    ratio=floor / m if name != "floor" else None,
                    ratio_to="floor req/s / this" if name != "floor" else "",
                    extra={
                        "topology": topology,
                        "tool": opts["tool"],
                        "connections": opts["connections"],
                        "p50_ms": p50,
                        "p99_ms": p99,
                        "p99_worst_round_ms": worst,
                        "of_floor": m / floor,
                        "server_cpu_ms_per_request": cpu_ms,
                        "busiest_process_cpu_share": busiest,
                        "unexpected_responses": unexpected,
                        "unexpected_codes": codes,
                        "round_trips_per_request": trips[_cached(topology)].get(name),
                        "scaling": m / first[name] if topology != opts["topologies"][0] else None,
                        "command": got[0]["command"],
                    },
                    note=f"p50 {p50:.1f} ms, p99 {p99:.1f} ms (worst round {worst:.0f}); {m / floor:.2f} of"
                    f" the floor; server CPU {cpu_ms:.1f} ms/request"
                    + split
                    + (f"; {unexpected} unexpected responses {codes}" if unexpected else ""),
                )
            )
    return rows


def main() -> None:
    """Bench 6 alone, with its options as flags."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topologies", default=None, help=f"e.g. {DEFAULT}")
    parser.add_argument("--tool", choices=["wrk", "python"], default=None)
    parser.add_argument("-d", "--duration", type=float, default=None, help="seconds per load")
    parser.add_argument("-c", "--connections", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--env", default=None, help="NAME=value,... for the server processes")
    args = parser.parse_args()
    for flag, name in (
        ("topologies", "BENCH_API_TOPOLOGIES"),
        ("tool", "BENCH_API_TOOL"),
        ("duration", "BENCH_API_DURATION"),
        ("connections", "BENCH_API_CONNECTIONS"),
        ("rounds", "BENCH_API_ROUNDS"),
        ("env", "BENCH_API_ENV"),
    ):
        if getattr(args, flag) is not None:
            os.environ[name] = str(getattr(args, flag))
    from bench.__main__ import render

    try:
        rows = run()
    finally:
        _pg.teardown()
    print(render(rows))


if __name__ == "__main__":
    main()
