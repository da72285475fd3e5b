"""An idempotency store in one SQLite file, safe across threads and processes."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from keelgate._sqlite import SqliteDatabase, open_store
from keelgate.errors import KeyNotOwnedError
from keelgate.idempotency._memory import claim_status_of, require_aware
from keelgate.idempotency._protocol import ClaimStatus, IdempotencyRecord, KeyStatus

__all__ = ["SqliteIdempotencyStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant_id        TEXT NOT NULL,
    key              TEXT NOT NULL,
    status           TEXT NOT NULL,
    owner            TEXT NOT NULL,
    run_id           TEXT NOT NULL,
    action_id        TEXT NOT NULL,
    claimed_at       TEXT NOT NULL,
    lease_expires_at TEXT NOT NULL,
    completed_at     TEXT,
    outcome          TEXT,
    settled_by       TEXT,
    PRIMARY KEY (tenant_id, key)
)
"""

_COLUMNS = (
    "tenant_id, key, status, owner, run_id, action_id, claimed_at, lease_expires_at,"
    " completed_at, outcome, settled_by"
)

_SELECT = f"SELECT {_COLUMNS} FROM idempotency_keys WHERE tenant_id = ? AND key = ?"


def _iso(value: datetime | None) -> str | None:
    """ISO text keeps the offset, so the value reads back timezone-aware."""
    return None if value is None else value.isoformat()


def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _record(row: tuple[Any, ...]) -> IdempotencyRecord:
    (
        tenant_id,
        key,
        status,
        owner,
        run_id,
        action_id,
        claimed_at,
        lease_expires_at,
        completed_at,
        outcome,
        settled_by,
    ) = row
    return IdempotencyRecord(
        tenant_id=tenant_id,
        key=key,
        status=KeyStatus(status),
        owner=owner,
        run_id=run_id,
        action_id=action_id,
        claimed_at=datetime.fromisoformat(claimed_at),
        lease_expires_at=datetime.fromisoformat(lease_expires_at),
        completed_at=_dt(completed_at),
        outcome=outcome,
        settled_by=settled_by,
    )


class SqliteIdempotencyStore:
    """:class:`~keelgate.idempotency.IdempotencyStore` in a SQLite file.

    Every write runs in ``BEGIN IMMEDIATE``, which takes the file's write lock before
    reading, so a check and the write that depends on it cannot interleave with
    another connection's, in this process or any other. WAL with ``synchronous=FULL``
    makes a commit durable before the method returns (the contract's last clause);
    ``busy_timeout`` makes competing writers wait rather than fail.

    One connection is shared by the threads of a process, serialised by a lock,
    because a sqlite3 connection cannot run two statements at once. Inside a held
    commit group a claim is durable once the group is flushed, which the gateway does
    before it calls the tool.
    """

    def __init__(self, path: str | Path | SqliteDatabase) -> None:
        self._db = open_store(path, [_SCHEMA])
        self._path = Path(self._db.path)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def commit_group(self) -> SqliteDatabase:
        """The database this store writes through (stores sharing it share commits)."""
        return self._db

    def claim(
        self,
        tenant_id: str,
        key: str,
        *,
        owner: str,
        run_id: str,
        action_id: str,
        now: datetime,
        lease_seconds: float,
    ) -> tuple[ClaimStatus, IdempotencyRecord]:
        """Claim ``key`` for ``owner`` if it is new; otherwise report what is stored."""
        require_aware(now)
        lease_expires_at = now + timedelta(seconds=lease_seconds)
        with self._db.write() as conn:
            inserted = conn.execute(
                f"INSERT INTO idempotency_keys ({_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)"
                " ON CONFLICT (tenant_id, key) DO NOTHING",
                (
                    tenant_id,
                    key,
                    KeyStatus.IN_FLIGHT.value,
                    owner,
                    run_id,
                    action_id,
                    _iso(now),
                    _iso(lease_expires_at),
                ),
            ).rowcount
            row = conn.execute(_SELECT, (tenant_id, key)).fetchone()
        record = _record(row)
        if inserted == 1:
            return ClaimStatus.CLAIMED, record
        return claim_status_of(record), record

    def complete(
        self, tenant_id: str, key: str, *, owner: str, outcome: str, now: datetime
    ) -> IdempotencyRecord:
        """Record the call's outcome (JSON text). Raises if ``owner`` does not hold the key."""
        require_aware(now)
        with self._db.write() as conn:
            updated = conn.execute(
                "UPDATE idempotency_keys SET status = ?, outcome = ?, completed_at = ?"
                " WHERE tenant_id = ? AND key = ? AND status = ? AND owner = ?",
                (
                    KeyStatus.COMPLETED.value,
                    outcome,
                    _iso(now),
                    tenant_id,
                    key,
                    KeyStatus.IN_FLIGHT.value,
                    owner,
                ),
            ).rowcount
            if updated != 1:
                raise KeyNotOwnedError(key)
            row = conn.execute(_SELECT, (tenant_id, key)).fetchone()
        return _record(row)

    def settle(
        self,
        tenant_id: str,
        key: str,
        *,
        executed: bool,
        by: str,
        outcome: str | None,
        now: datetime,
    ) -> IdempotencyRecord:
        """Settle an in-flight key as completed or abandoned (reconcile)."""
        require_aware(now)
        status = KeyStatus.COMPLETED if executed else KeyStatus.ABANDONED
        with self._db.write() as conn:
            updated = conn.execute(
                "UPDATE idempotency_keys"
                " SET status = ?, outcome = ?, completed_at = ?, settled_by = ?"
                " WHERE tenant_id = ? AND key = ? AND status = ?",
                (
                    status.value,
                    outcome,
                    _iso(now),
                    by,
                    tenant_id,
                    key,
                    KeyStatus.IN_FLIGHT.value,
                ),
            ).rowcount
            if updated != 1:
                raise KeyNotOwnedError(key)
            row = conn.execute(_SELECT, (tenant_id, key)).fetchone()
        return _record(row)

    def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The stored record, or None."""
        with self._db.read() as conn:
            row = conn.execute(_SELECT, (tenant_id, key)).fetchone()
        return None if row is None else _record(row)

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
