"""What every benchmark shares: the interleaved runner, result rows, progress, scratch files.

A benchmark never times a system alone. :func:`interleave` runs one batch of every
system per round, rotating the order each round, so a burst of load from someone else's
test suite lands on all of them alike; the figure reported is the median over rounds
and the ratio is taken between medians.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
SCRATCH = BENCH_DIR / ".scratch"
"""Database files live here, on the same disk as the repository (ignored by git)."""

_T0 = time.monotonic()


def progress(message: str) -> None:
    """One line on stderr, with the seconds since the benchmark started."""
    print(f"[{time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def quick() -> bool:
    """True when QUICK is set (``make bench QUICK=1``)."""
    return os.environ.get("QUICK", "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass
class Row:
    """One line of the table: a system's median figure, and its ratio to the baseline."""

    bench: str
    system: str
    metric: str
    unit: str
    median: float | None
    rounds: list[float] = field(default_factory=list)
    ratio: float | None = None
    ratio_to: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def interleave(
    name: str,
    cases: dict[str, Callable[[], float]],
    *,
    rounds: int,
    between: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Run every case once per round, rotating the order; return each case's per-round values.

    A case runs one batch and returns its figure for that batch (for example seconds per
    iteration). Round ``r`` starts with case ``r mod n``, so every case takes every place.
    ``between`` runs before each round, untimed (``bench._pg.maintain``).
    """
    names = list(cases)
    values: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        if between is not None:
            between()
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            values[n].append(cases[n]())
        summary = ", ".join(f"{n} {fmt(values[n][-1])}" for n in names)
        progress(f"{name}: round {r + 1}/{rounds}: {summary}")
    return values


def fmt(value: float | None, digits: int = 3) -> str:
    """A compact number: 12.3k, 4.56, 0.0123."""
    if value is None:
        return "-"
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.{digits}g}M"
    if a >= 1e4:
        return f"{value / 1e3:.{digits}g}k"
    return f"{value:.{digits}g}"


@contextmanager
def scratch(label: str) -> Iterator[Path]:
    """A fresh folder under ``bench/.scratch``, removed afterwards."""
    path = SCRATCH / f"{label}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def prewarm_sqlite(path: Path, megabytes: int = 6) -> sqlite3.Connection:
    """Give the file a full-size WAL before anything is timed; keep the returned connection open.

    A WAL that is still growing costs ten to twenty times more per fsync (5.6 ms against
    0.3 ms on the 2-core VM this was written on: the file system journals every size
    change) than one being reused from its start, which is every long-lived database's
    steady state. Writing a few megabytes once and deleting them
    brings a fresh file straight to that state. SQLite deletes the WAL when the last
    connection closes, so the caller holds the returned idle connection until the end.
    Every SQLite file of every system gets the same treatment.
    """
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE IF NOT EXISTS _bench_prewarm (b BLOB)")
    db.execute("BEGIN IMMEDIATE")
    chunk = os.urandom(4096)
    for _ in range(megabytes * 256):
        db.execute("INSERT INTO _bench_prewarm VALUES (?)", (chunk,))
    db.execute("COMMIT")
    db.execute("DROP TABLE _bench_prewarm")
    return db


class SqliteFloor:
    """The floor: bare ``BEGIN IMMEDIATE; INSERT; COMMIT`` transactions on one SQLite file.

    WAL and ``synchronous=FULL``, like Keelgate's stores, and a 64-byte row: what a
    durable commit costs on this disk with nothing else around it.
    """

    def __init__(self, path: Path) -> None:
        self.holder = prewarm_sqlite(path)
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, v BLOB)")
        self.payload = b"x" * 64

    def commits(self, n: int) -> None:
        db = self.db
        for _ in range(n):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO floor (v) VALUES (?)", (self.payload,))
            db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()
        self.holder.close()


class CommitCounter:
    """Counts durable commits on sqlite3 connections through their trace callbacks.

    A commit is an explicit ``COMMIT`` (or ``END``), or a data-changing statement run
    outside a transaction (SQLite's autocommit). Used only in calibration batches,
    never while timing: the callback costs a Python call per statement.
    """

    _WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")

    def __init__(self) -> None:
        self.commits: dict[str, int] = {}
        self.statements: dict[str, int] = {}
        self._conns: list[sqlite3.Connection] = []

    def attach(self, label: str, conn: sqlite3.Connection) -> None:
        self.commits.setdefault(label, 0)
        self.statements.setdefault(label, 0)

        def trace(sql: str) -> None:
            head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            self.statements[label] += 1
            if head in ("COMMIT", "END") or (head in self._WRITES and not conn.in_transaction):
                self.commits[label] += 1

        conn.set_trace_callback(trace)
        self._conns.append(conn)

    def detach(self) -> None:
        for conn in self._conns:
            conn.set_trace_callback(None)
        self._conns.clear()

    @property
    def total(self) -> int:
        return sum(self.commits.values())


def write_json(path: Path, data: Any) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    tmp.replace(path)
