"""The audit log in one SQLite file, shared safely by threads and processes.

Appends take SQLite's write lock up front (``BEGIN IMMEDIATE``) before reading the
chain head, so two writers, in any processes, can never both extend the same head.
WAL lets readers stream a long chain while writers append, and ``synchronous=FULL``
makes a returned append survive power loss, not just a process crash.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from keelgate._sqlite import SqliteDatabase, open_store
from keelgate.audit._event import GENESIS_HASH, AuditEvent, encode_body, format_at, stored_event
from keelgate.canonical import canonical_json
from keelgate.clock import Clock, SystemClock
from keelgate.errors import ChainBrokenError

__all__ = ["SqliteAuditLog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_events (
    tenant_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at TEXT NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
)
"""

_COLUMNS = "tenant_id, seq, at, actor, kind, body, prev_hash, hash"


_PAGE = 1_000
"""Rows fetched per query while streaming: bounded memory, and the lock is never held
while the caller works on an event."""

_Row = tuple[Any, Any, Any, Any, Any, Any, Any, Any]


class SqliteAuditLog:
    """A per-tenant hash chain in a SQLite file (created if missing).

    One connection per instance, shared by its threads behind a lock; open one
    instance per process. Call :meth:`close` when done.
    """

    def __init__(self, path: str | Path | SqliteDatabase, *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._db = open_store(path, [_SCHEMA])

    @property
    def commit_group(self) -> SqliteDatabase:
        """The database this log writes through (stores sharing it share commits)."""
        return self._db

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event, committed durably, and return it as stored.

        Raises TypeError or ValueError, appending nothing, when ``body`` is not JSON.
        """
        encoded = encode_body(body)  # refuse a non-JSON body before taking the lock

        with self._db.write() as conn:
            row = conn.execute(
                "SELECT seq, hash FROM audit_events WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1",
                (tenant_id,),
            ).fetchone()
            last_seq, last_hash = (int(row[0]), str(row[1])) if row else (0, GENESIS_HASH)
            event = stored_event(tenant_id, last_seq + 1, self._clock.now(), actor, kind, encoded, last_hash)
            conn.execute(
                f"INSERT INTO audit_events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    event.tenant_id,
                    event.seq,
                    format_at(event.at),
                    event.actor,
                    event.kind,
                    encoded[0],
                    event.prev_hash,
                    event.hash,
                ),
            )
        return event

    def events(self, tenant_id: str, *, after_seq: int = 0, limit: int | None = None) -> Iterator[AuditEvent]:
        """The tenant's events after ``after_seq``, oldest first, fetched page by page."""
        cursor_seq = after_seq
        remaining = limit
        while remaining is None or remaining > 0:
            page = _PAGE if remaining is None else min(_PAGE, remaining)
            rows, broken = self._page(tenant_id, cursor_seq, page)
            for row in rows:
                yield _event_from_row(row)
            if broken:
                raise ChainBrokenError("an audit row that is not UTF-8 text")
            if len(rows) < page:
                return
            cursor_seq = int(rows[-1][1])
            if remaining is not None:
                remaining -= len(rows)

    def rows(self, tenant_id: str, *, after_seq: int = 0) -> Iterator[_Row]:
        """The tenant's rows exactly as stored, oldest first, fetched page by page.

        :func:`~keelgate.audit.verify` hashes this text directly: rebuilding an event
        from each row costs more than the hashing (docs/performance.md#audit-verify).
        Pages and order are those of :meth:`events`, and the lock is likewise never held
        while the caller works.
        """
        cursor_seq: Any = after_seq
        while True:
            page, broken = self._page(tenant_id, cursor_seq, _PAGE)
            yield from page
            if broken:
                raise ChainBrokenError("an audit row that is not UTF-8 text")
            if len(page) < _PAGE:
                return
            # The stored value, not int() of it: a tampered seq of 7.5 must not come round again.
            cursor_seq = page[-1][1]

    def _page(self, tenant_id: str, after_seq: Any, size: int) -> tuple[list[_Row], bool]:
        """Up to ``size`` rows after ``after_seq``, oldest first, and whether a row broke it.

        A row whose text is not UTF-8 cannot even be fetched: the rows before it come
        back, with True, and the caller raises :class:`ChainBrokenError` after them, so a
        verifier reports a broken link at that row instead of crashing.
        """
        sql = f"SELECT {_COLUMNS} FROM audit_events WHERE tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        with self._db.read() as conn:
            try:
                return conn.execute(sql, (tenant_id, after_seq, size)).fetchall(), False
            except sqlite3.OperationalError:
                rows: list[_Row] = []
                cursor = conn.execute(sql, (tenant_id, after_seq, size))
                while True:
                    try:
                        row = cursor.fetchone()
                    except sqlite3.OperationalError:
                        return rows, True
                    if row is None:
                        return rows, False
                    rows.append(row)

    def head(self, tenant_id: str) -> AuditEvent | None:
        """The newest event of the tenant's chain."""
        with self._db.read() as conn:
            row: _Row | None = conn.execute(
                f"SELECT {_COLUMNS} FROM audit_events WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1",
                (tenant_id,),
            ).fetchone()
        return _event_from_row(row) if row is not None else None

    def close(self) -> None:
        """Close the connection; the instance is unusable afterwards."""
        self._db.close()

    def __enter__(self) -> SqliteAuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _event_from_row(row: _Row) -> AuditEvent:
    """An event from a stored row, skipping validation: the hash check is the validation.

    A row too damaged to read at all raises :class:`ChainBrokenError`, which
    :func:`~keelgate.audit.verify_chain` reports as a broken link.
    """
    tenant_id, seq, at_text, actor, kind, body_text, prev_hash, hash_ = row
    if not isinstance(seq, int):
        raise ChainBrokenError("audit row with a non-integer seq")
    try:
        at = datetime.fromisoformat(at_text)
        body = json.loads(body_text)
        # Text written any other way than append writes it (spaces, key order, no
        # microseconds) is not what was hashed: broken, as the fast verifier says too.
        as_stored = format_at(at) == at_text and canonical_json(body) == body_text
    except (TypeError, ValueError, RecursionError) as exc:
        raise ChainBrokenError(f"unreadable audit row, seq {seq}") from exc
    if at.tzinfo is None:
        raise ChainBrokenError(f"audit row without a time zone, seq {seq}")
    if not as_stored:
        raise ChainBrokenError(f"audit row not in its stored form, seq {seq}")
    return AuditEvent.model_construct(
        tenant_id=tenant_id,
        seq=seq,
        at=at,
        actor=actor,
        kind=kind,
        body=body,
        prev_hash=prev_hash,
        hash=hash_,
    )
