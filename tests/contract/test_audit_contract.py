"""The audit log contract, run against the in-memory and the SQLite log."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keelgate.audit import AuditLog, InMemoryAuditLog, SqliteAuditLog
from keelgate.testing.contract.audit import ChainedAuditLogContract, LogFactory


class TestInMemoryAuditLog(ChainedAuditLogContract):
    """The in-memory log: every handle is the same instance."""

    @pytest.fixture
    def make_log(self) -> LogFactory:
        log = InMemoryAuditLog()
        return lambda: log


class TestSqliteAuditLog(ChainedAuditLogContract):
    """The SQLite log: every handle is a new connection to one file."""

    @pytest.fixture
    def make_log(self, tmp_path: Path) -> Iterator[LogFactory]:
        opened: list[SqliteAuditLog] = []

        def open_log() -> AuditLog:
            log = SqliteAuditLog(tmp_path / "audit.sqlite3")
            opened.append(log)
            return log

        yield open_log
        for log in opened:
            log.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_logs_satisfy_the_protocol(kind: str, tmp_path: Path) -> None:
    """Both logs are AuditLog instances at runtime."""
    if kind == "memory":
        assert isinstance(InMemoryAuditLog(), AuditLog)
        return
    with SqliteAuditLog(tmp_path / "a.sqlite3") as log:
        assert isinstance(log, AuditLog)


def test_sqlite_log_uses_wal_and_full_sync(tmp_path: Path) -> None:
    """The SQLite file is in WAL mode and the connection syncs fully on commit."""
    with SqliteAuditLog(tmp_path / "a.sqlite3") as log:
        conn = log._db.conn
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (30000,)


def test_clock_sets_the_event_time(tmp_path: Path) -> None:
    """Both logs stamp events with the injected clock's now(), kept to the microsecond."""
    at = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    clock = _FixedClock(at)
    with SqliteAuditLog(tmp_path / "a.sqlite3", clock=clock) as log:
        log.append("t", actor="a", kind="k", body={})
        assert [event.at for event in log.events("t")] == [at]
    assert InMemoryAuditLog(clock=clock).append("t", actor="a", kind="k", body={}).at == at


class _FixedClock:
    def __init__(self, at: datetime) -> None:
        self._at = at

    def now(self) -> datetime:
        return self._at

    def monotonic(self) -> float:
        return 0.0
