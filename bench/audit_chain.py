"""4. The audit chain: appends per second, and verification against bare SHA-256.

Appends: ``SqliteAuditLog.append`` (one writer) against the SQLite floor of one bare
commit per event; ``DjangoAuditLog.append`` on PostgreSQL (one writer, then four writer
processes on the same tenant's chain, which serialise on its head row) against one bare
commit per event from as many processes.

Verification: a chain of 1,000,000 events (QUICK: 100,000) is written straight into a
``SqliteAuditLog`` file with the engine's own hashing, its events copied from a real
step's six (run.started, loop.planned, two gateway.call, ..., run.stopped) with a run id
per step. ``keelgate.audit.verify`` reads it back (the stored text, through
``SqliteAuditLog.rows``) and checks every link; the floor is ``sha256(prev_hash ||
canonical bytes)`` chained over the very bytes it must hash, held in memory, and the two
heads must match. Over a 100,000-event slice already in memory (QUICK 20,000),
``verify_rows`` over the stored rows separates reading SQLite from checking them, and
``verify_chain`` over events shows the cost of encoding every event again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing as mp
import sqlite3
import time
from itertools import islice
from pathlib import Path
from typing import Any

from bench import _pg
from bench._common import Row, SqliteFloor, interleave, median, prewarm_sqlite, progress, quick, scratch
from bench._scenario import SqliteKeelgate, run_step
from keelgate.audit import (
    GENESIS_HASH,
    SqliteAuditLog,
    fast_canonical,
    format_at,
    verify,
    verify_chain,
    verify_rows,
)

BENCH_APPEND = "4a. audit append"
BENCH_VERIFY = "4b. audit verification"
TENANT = "bench"


def _template_events(root: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(actor, kind, body) of the six events one real step appends."""
    k = SqliteKeelgate(root, prewarm=False)
    try:
        result = asyncio.run(run_step(k.loop, run_id="0" * 32))
        events = list(k.audit.events(result.state.tenant_id))
    finally:
        k.close()
    return [(e.actor, e.kind, dict(e.body)) for e in events]


def build_chain(path: Path, n: int, templates: list[tuple[str, str, dict[str, Any]]]) -> list[bytes]:
    """Write an ``n``-event chain into a SqliteAuditLog file; return each event's canonical bytes."""
    from datetime import UTC, datetime, timedelta

    SqliteAuditLog(path).close()  # the schema
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    blobs: list[bytes] = []
    prev = GENESIS_HASH
    start = datetime(2026, 1, 1, tzinfo=UTC)
    sha256 = hashlib.sha256
    db.execute("BEGIN")
    rows = []
    for i in range(n):
        actor, kind, body = templates[i % len(templates)]
        body = {**body, "run_id": f"{i // len(templates):032x}"}
        seq = i + 1
        at = start + timedelta(microseconds=1000 * i)
        canonical = fast_canonical(TENANT, seq, at, actor, kind, body)
        digest = sha256(prev.encode("ascii") + canonical).hexdigest()
        rows.append(
            (
                TENANT,
                seq,
                format_at(at),
                actor,
                kind,
                json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
                prev,
                digest,
            )
        )
        blobs.append(canonical)
        prev = digest
        if len(rows) == 20_000:
            db.executemany("INSERT INTO audit_events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            rows.clear()
    db.executemany("INSERT INTO audit_events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.execute("COMMIT")
    db.close()
    return blobs


def sha256_floor(blobs: list[bytes]) -> str:
    """The floor: the chained SHA-256 that verification cannot avoid, over bytes in memory."""
    sha256 = hashlib.sha256
    prev = GENESIS_HASH.encode("ascii")
    for blob in blobs:
        digest = sha256(prev)
        digest.update(blob)
        prev = digest.hexdigest().encode("ascii")
    return prev.decode("ascii")


def run_verify() -> list[Row]:
    n = 100_000 if quick() else 1_000_000
    rounds = 2 if quick() else 3
    with scratch("audit-verify") as root:
        templates = _template_events(root)
        path = root / "chain.sqlite3"
        t = time.perf_counter()
        blobs = build_chain(path, n, templates)
        progress(
            f"{BENCH_VERIFY}: built a {n:,}-event chain in {time.perf_counter() - t:.1f}s "
            f"({sum(map(len, blobs)) / n:.0f} canonical bytes per event)"
        )
        log = SqliteAuditLog(path)
        head: dict[str, str] = {}
        try:

            def keelgate() -> float:
                t = time.perf_counter()
                report = verify(log, TENANT)
                elapsed = time.perf_counter() - t
                if not report.ok or report.checked != n:
                    raise RuntimeError(f"verification failed: {report}")
                head["keelgate"] = report.head_hash
                return n / elapsed

            def floor() -> float:
                t = time.perf_counter()
                head["floor"] = sha256_floor(blobs)
                return n / (time.perf_counter() - t)

            values = interleave(BENCH_VERIFY, {"keelgate": keelgate, "floor": floor}, rounds=rounds)
            if head["keelgate"] != head["floor"]:
                raise RuntimeError("the floor hashed different bytes than the verifier")
            part = 20_000 if quick() else 100_000
            events = list(log.events(TENANT, limit=part))
            rows = list(islice(log.rows(TENANT), part))
            part_blobs = blobs[:part]

            def in_memory_rows() -> float:
                t = time.perf_counter()
                report = verify_rows(rows, tenant_id=TENANT)
                elapsed = time.perf_counter() - t
                if not report.ok or report.head_hash != events[-1].hash:
                    raise RuntimeError(f"verification failed: {report}")
                return part / elapsed

            def in_memory() -> float:
                t = time.perf_counter()
                report = verify_chain(events, tenant_id=TENANT)
                elapsed = time.perf_counter() - t
                if not report.ok:
                    raise RuntimeError(f"verification failed: {report}")
                return part / elapsed

            def floor_part() -> float:
                t = time.perf_counter()
                sha256_floor(part_blobs)
                return part / (time.perf_counter() - t)

            mem = interleave(
                f"{BENCH_VERIFY} in memory",
                {"in_memory_rows": in_memory_rows, "in_memory": in_memory, "floor": floor_part},
                rounds=rounds,
            )
        finally:
            log.close()
    km, fm = median(values["keelgate"]), median(values["floor"])
    mm, pm = median(mem["in_memory"]), median(mem["floor"])
    rm = median(mem["in_memory_rows"])
    return [
        Row(
            BENCH_VERIFY,
            f"keelgate.audit.verify over SqliteAuditLog, {n:,} events",
            "verify",
            "events/s",
            km,
            values["keelgate"],
            extra={"events": n, "vs_floor_time": fm / km},
        ),
        Row(
            BENCH_VERIFY,
            "floor: chained sha256(prev || canonical bytes), bytes in memory",
            "verify",
            "events/s",
            fm,
            values["floor"],
            ratio=fm / km,
            ratio_to="Keelgate time / floor time",
            extra={"events": n},
        ),
        Row(
            BENCH_VERIFY,
            f"keelgate.audit.verify_rows, {part:,} stored rows already in memory",
            "verify",
            "events/s",
            rm,
            mem["in_memory_rows"],
            extra={"events": part, "vs_floor_time": pm / rm},
        ),
        Row(
            BENCH_VERIFY,
            f"keelgate.audit.verify_chain, {part:,} events already in memory",
            "verify",
            "events/s",
            mm,
            mem["in_memory"],
            extra={"events": part},
        ),
        Row(
            BENCH_VERIFY,
            f"floor over the same {part:,} events",
            "verify",
            "events/s",
            pm,
            mem["floor"],
            ratio=pm / mm,
            ratio_to="Keelgate time / floor time",
            extra={"events": part},
        ),
    ]


BODY = {
    "run_id": "0" * 32,
    "action_id": "1-2",
    "tool": "place_order",
    "idempotency_key": "f" * 64,
    "status": "done",
    "code": None,
    "replayed": False,
}


def run_append_sqlite() -> list[Row]:
    batch, rounds = (50, 3) if quick() else (200, 7)
    with scratch("audit-append") as root:
        holder = prewarm_sqlite(root / "audit.sqlite3")
        log = SqliteAuditLog(root / "audit.sqlite3")
        floor = SqliteFloor(root / "floor.sqlite3")
        try:

            def keelgate() -> float:
                t = time.perf_counter()
                for _ in range(batch):
                    log.append(TENANT, actor="agent:trader", kind="gateway.call", body=BODY)
                return batch / (time.perf_counter() - t)

            def bare() -> float:
                t = time.perf_counter()
                floor.commits(batch)
                return batch / (time.perf_counter() - t)

            keelgate(), bare()
            values = interleave(
                f"{BENCH_APPEND} SQLite", {"keelgate": keelgate, "floor": bare}, rounds=rounds
            )
        finally:
            log.close()
            floor.close()
            holder.close()
    km, fm = median(values["keelgate"]), median(values["floor"])
    return [
        Row(
            BENCH_APPEND,
            "SqliteAuditLog.append, 1 writer",
            "append",
            "appends/s",
            km,
            values["keelgate"],
            extra={"batch": batch},
        ),
        Row(
            BENCH_APPEND,
            "floor: bare INSERT+COMMIT on SQLite (WAL, FULL), 1 writer",
            "append",
            "commits/s",
            fm,
            values["floor"],
            ratio=fm / km,
            ratio_to="Keelgate time / floor time",
            extra={"batch": batch},
        ),
    ]


# -- PostgreSQL ---------------------------------------------------------------------------


def _django_appends(n: int) -> None:
    from audit.wiring import audit_log

    log = audit_log()
    for _ in range(n):
        log.append(TENANT, actor="agent:trader", kind="gateway.call", body=BODY)


def _floor_appends(n: int) -> None:
    from bench.step_postgres import PgFloor

    floor = PgFloor()
    try:
        floor.commits(n)
    finally:
        floor.close()


def _child(kind: str, n: int, ready: Any, go: Any, out: Any) -> None:
    """One writer process: connect, warm up, wait for the start, write ``n``, report the end."""
    from django.db import connection

    if kind == "keelgate":
        _django_appends(1)
        ready.release()
        go.wait()
        _django_appends(n)
        connection.close()
    else:
        from bench.step_postgres import PgFloor

        floor = PgFloor()
        floor.commits(1)
        ready.release()
        go.wait()
        floor.commits(n)
        floor.close()
    out.put(time.perf_counter())


def _concurrent(kind: str, writers: int, n: int) -> float:
    """Events per second from ``writers`` forked processes, ``n`` each, from a common start."""
    from django.db import connections

    connections.close_all()  # children must open their own
    ctx = mp.get_context("fork")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(kind, n, ready, go, out)) for _ in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=120):
            raise RuntimeError("a writer process did not start")
    start = time.perf_counter()
    go.set()
    ends = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a writer process failed ({p.exitcode})")
    return writers * n / (max(ends) - start)


def run_append_postgres() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH_APPEND, f"not measured on PostgreSQL: {why}", "", "", None)]
    _pg.setup_django()
    batch, rounds = (20, 3) if quick() else (100, 7)
    per_writer = batch // 2 if quick() else batch
    from bench.step_postgres import PgFloor

    floor = PgFloor()
    try:

        def keelgate() -> float:
            t = time.perf_counter()
            _django_appends(batch)
            return batch / (time.perf_counter() - t)

        def bare() -> float:
            t = time.perf_counter()
            floor.commits(batch)
            return batch / (time.perf_counter() - t)

        keelgate(), bare()
        one = interleave(
            f"{BENCH_APPEND} PostgreSQL, 1 writer", {"keelgate": keelgate, "floor": bare}, rounds=rounds
        )
    finally:
        floor.close()
    four = interleave(
        f"{BENCH_APPEND} PostgreSQL, 4 writers",
        {
            "keelgate": lambda: _concurrent("keelgate", 4, per_writer),
            "floor": lambda: _concurrent("floor", 4, per_writer),
        },
        rounds=3 if quick() else 5,
    )
    rows = []
    for label, values, writers in (("1 writer", one, 1), ("4 writer processes, one chain", four, 4)):
        km, fm = median(values["keelgate"]), median(values["floor"])
        rows.append(
            Row(
                BENCH_APPEND,
                f"DjangoAuditLog.append on PostgreSQL, {label}",
                "append",
                "appends/s",
                km,
                values["keelgate"],
                extra={"writers": writers},
            )
        )
        rows.append(
            Row(
                BENCH_APPEND,
                f"floor: bare INSERT+COMMIT on PostgreSQL, {writers} writer(s)",
                "append",
                "commits/s",
                fm,
                values["floor"],
                ratio=fm / km,
                ratio_to="Keelgate time / floor time",
                extra={"writers": writers},
            )
        )
    return rows


def run() -> list[Row]:
    rows = run_append_sqlite()
    rows.extend(run_append_postgres())
    rows.extend(run_verify())
    return rows
