"""The audit log contract, run against the in-memory and the SQLite log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from keelgate.audit import AuditLog, InMemoryAuditLog, SqliteAuditLog
from keelgate.testing.contract.audit import AuditLogContract, LogFactory


class TestInMemoryAuditLog(AuditLogContract):
    """The in-memory log: every handle is the same instance."""

    @pytest.fixture
    def make_log(self) -> LogFactory:
        log = InMemoryAuditLog()
        return lambda: log


class TestSqliteAuditLog(AuditLogContract):
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
    log = InMemoryAuditLog() if kind == "memory" else SqliteAuditLog(tmp_path / "a.sqlite3")
    assert isinstance(log, AuditLog)
    if isinstance(log, SqliteAuditLog):
        log.close()
