"""``python -m bench.profile``: where one Keelgate step's time goes (and verification's).

Not part of ``make bench``. Three reports:

1. The SQLite step (benchmark 1), wall time split into disjoint parts: COMMIT (the
   fsync) and other SQL per store, measured by wrapping each store's connection, and
   the pure-Python hot spots measured by wrapping them (tool JSON schemas, checkpoint
   serialisation, audit event building); the rest is the loop itself. Then cProfile's
   top functions. Run with synchronous=FULL and again with OFF.
2. The PostgreSQL step (benchmark 2): every query timed and grouped by what it does,
   plus the commits; the rest is Python.
3. ``keelgate.audit.verify`` over a 50,000-event chain under cProfile.

``--steps N`` sets how many steps are measured (default 100); ``--only 1,2,3``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import scratch

_acc: dict[str, float] = defaultdict(float)
_calls: dict[str, int] = defaultdict(int)


class TimedConnection:
    """A sqlite3 connection whose ``execute`` is timed: COMMIT apart from other statements."""

    def __init__(self, label: str, conn: sqlite3.Connection) -> None:
        self._label = label
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        kind = "COMMIT" if sql.strip().upper() == "COMMIT" else "other SQL"
        t = time.perf_counter()
        try:
            return self._conn.execute(sql, *args)
        finally:
            key = f"sqlite {kind}: {self._label}"
            _acc[key] += time.perf_counter() - t
            _calls[key] += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _timed(owner: Any, name: str, label: str) -> Callable[[], None]:
    """Wrap ``owner.name`` to add its inclusive time to ``label``; returns the undo."""
    original = owner.__dict__.get(name)
    if original is None:  # the engine changed: profile what is still there
        return lambda: None
    func = original.__func__ if isinstance(original, (classmethod, staticmethod)) else original

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            _acc[label] += time.perf_counter() - t
            _calls[label] += 1

    setattr(owner, name, classmethod(wrapper) if isinstance(original, classmethod) else wrapper)
    return lambda: setattr(owner, name, original)


def _hot_spots() -> list[Callable[[], None]]:
    """The pure-Python parts worth naming; none of them runs SQL, so the parts are disjoint."""
    from keelgate.audit import AuditEvent
    from keelgate.gateway import Gateway
    from keelgate.loop import LoopState

    return [
        _timed(Gateway, "specs", "python: Gateway.specs (tool JSON schemas, every plan)"),
        _timed(LoopState, "to_json", "python: LoopState.to_json (whole state, every save)"),
        _timed(LoopState, "from_json", "python: LoopState.from_json"),
        _timed(AuditEvent, "build", "python: AuditEvent.build (validate, canonical JSON, sha256)"),
    ]


def _report(title: str, total: float, steps: int) -> None:
    print(f"\n{title}: {total / steps * 1e6:,.0f} us per step over {steps} steps")
    accounted = 0.0
    for key, value in sorted(_acc.items(), key=lambda kv: -kv[1]):
        accounted += value
        print(
            f"  {value / steps * 1e6:9,.0f} us  {value / total:6.1%}  {_calls[key] / steps:6.1f}/step  {key}"
        )
    print(
        f"  {(total - accounted) / steps * 1e6:9,.0f} us  {(total - accounted) / total:6.1%}"
        "            the rest (loop, gateway, pydantic models, stores' Python)"
    )


def profile_sqlite(steps: int) -> None:
    from bench._scenario import SqliteKeelgate, run_step

    for mode in ("FULL", "OFF"):
        with scratch("profile") as root:
            k = SqliteKeelgate(root)
            for conn in k.connections().values():
                conn.execute(f"PRAGMA synchronous = {mode}")
            runner = asyncio.Runner()

            async def batch(n: int, loop: Any = k.loop) -> None:
                for _ in range(n):
                    await run_step(loop)

            runner.run(batch(20))  # warm
            db = k.checkpoints.commit_group  # SqliteStores: one database for all three stores
            db.conn = TimedConnection("one file", db.conn)  # type: ignore[assignment]
            undo = _hot_spots()
            _acc.clear()
            _calls.clear()
            t = time.perf_counter()
            runner.run(batch(steps))
            total = time.perf_counter() - t
            _report(f"1. SQLite step, synchronous={mode}", total, steps)
            for u in undo:
                u()
            sizes = k.checkpoints.commit_group.conn.execute(
                "SELECT count(*), avg(length(state) + coalesce(length(data), 0)),"
                " max(length(state) + coalesce(length(data), 0)) FROM checkpoints"
            ).fetchone()
            print(
                f"  stored checkpoint (deflated): {sizes[1]:,.0f} bytes on average, {sizes[2]:,} at most, "
                f"{sizes[0] / (steps + 21):.1f} saves per step"
            )
            if mode == "OFF":
                prof = cProfile.Profile()
                prof.enable()
                runner.run(batch(steps))
                prof.disable()
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
                print("\n  cProfile, synchronous=OFF, by own time:")
                print("\n".join("  " + line for line in out.getvalue().splitlines()[6:]))
            runner.close()
            k.close()


_GROUPS = (
    (r"FROM \"runs_run\".*FOR UPDATE", "fence: SELECT runs_run FOR UPDATE"),
    (r"^SAVEPOINT|^RELEASE SAVEPOINT|^ROLLBACK TO SAVEPOINT", "SAVEPOINT / RELEASE"),
    (r"^SELECT.*FROM \"runs_checkpoint\"", "checkpoint: SELECT (latest seq, load)"),
    (r"^INSERT INTO \"runs_checkpoint\"", "checkpoint: INSERT"),
    (r"^UPDATE \"runs_run\"", "projection: UPDATE runs_run"),
    (r"approvals_", "projection: inbox tables"),
    (r"runs_idempotencyrecord", "idempotency: claim / complete / read"),
    (r"audit_chainhead", "audit: chain head (insert-if-missing, lock, update)"),
    (r"^INSERT INTO \"audit_auditevent\"", "audit: INSERT event"),
    (r"pg_notify", "audit: pg_notify"),
)


def profile_postgres(steps: int) -> None:
    from bench import _pg

    _pg.setup_django()
    from django.db import connections

    from bench.step_postgres import _new_runs, keelgate_step

    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        runs = sql  # a commit group's message: its statements joined by "; "
        group = next(
            (name for pattern, name in _GROUPS if re.search(pattern, runs, re.S)), "other: " + runs[:60]
        )
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            times[group] += time.perf_counter() - t
            counts[group] += 1

    runner = asyncio.Runner()
    try:
        warm = _new_runs(10)
        ids = _new_runs(steps)

        async def go(batch: list[str], wrap: bool) -> float:
            conn = connections["default"]
            if not wrap:
                for r in batch:
                    await keelgate_step(r)
                return 0.0
            original = conn.commit

            def commit() -> None:
                t = time.perf_counter()
                original()
                times["COMMIT"] += time.perf_counter() - t
                counts["COMMIT"] += 1

            conn.commit = commit
            try:
                with conn.execute_wrapper(wrapper):
                    t = time.perf_counter()
                    for r in batch:
                        await keelgate_step(r)
                    return time.perf_counter() - t
            finally:
                del conn.commit

        runner.run(go(warm, False))
        total = runner.run(go(ids, True))
    finally:
        runner.close()
        connections.close_all()
        _pg.teardown()
    print(
        f"\n2. PostgreSQL step (Django stores, fenced): {total / steps * 1e6:,.0f} us per step over {steps}"
    )
    db = 0.0
    for key, value in sorted(times.items(), key=lambda kv: -kv[1]):
        db += value
        print(
            f"  {value / steps * 1e6:9,.0f} us  {value / total:6.1%}  {counts[key] / steps:6.1f}/step  {key}"
        )
    rest = total - db
    print(f"  {rest / steps * 1e6:9,.0f} us  {rest / total:6.1%}            Python (engine, ORM)")


def build_chain(path: Path, n: int, templates: list[tuple[str, str, dict[str, Any]]]) -> list[bytes]:
    """Write an ``n``-event chain into the engine's SqliteAuditLog file; each event's canonical bytes."""
    import hashlib
    import json
    from datetime import UTC, datetime, timedelta

    from keelgate.audit import GENESIS_HASH, SqliteAuditLog, fast_canonical, format_at

    tenant = "bench"

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
        canonical = fast_canonical(tenant, seq, at, actor, kind, body)
        digest = sha256(prev.encode("ascii") + canonical).hexdigest()
        rows.append(
            (
                tenant,
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


def profile_verify(n: int = 50_000) -> None:
    from bench.audit_chain import TENANT, _template_events
    from keelgate.audit import SqliteAuditLog, verify

    with scratch("profile-verify") as root:
        build_chain(root / "chain.sqlite3", n, _template_events(root))
        log = SqliteAuditLog(root / "chain.sqlite3")
        verify(log, TENANT)
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        report = verify(log, TENANT)
        prof.disable()
        elapsed = time.perf_counter() - t
        log.close()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
    print(f"\n3. verify over {n:,} events (under cProfile: {n / elapsed:,.0f} events/s, ok={report.ok}):")
    print("\n".join("  " + line for line in out.getvalue().splitlines()[6:]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--only", default="1,2,3")
    args = parser.parse_args()
    chosen = set(args.only.split(","))
    if "1" in chosen:
        profile_sqlite(args.steps)
    if "2" in chosen:
        profile_postgres(max(10, args.steps // 4))
    if "3" in chosen:
        profile_verify()


if __name__ == "__main__":
    main()
