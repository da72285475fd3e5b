"""The default durable checkpoint store: one SQLite file, standard library only."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from keelgate._sqlite import SqliteDatabase, open_store
from keelgate._state import LoopState
from keelgate.errors import StaleCheckpointError

__all__ = ["SqliteCheckpointStore"]

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS checkpoints (
        tenant_id TEXT NOT NULL,
        run_id    TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        phase     TEXT NOT NULL,
        trace_id  TEXT NOT NULL,
        state     TEXT NOT NULL,
        saved_at  TEXT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, seq)
    )
    """,
    # One row per run: its order of first save (for ``runs``) and the trace id of its
    # latest checkpoint (for ``find_by_trace``), so neither has to scan every state.
    """
    CREATE TABLE IF NOT EXISTS runs (
        tenant_id  TEXT NOT NULL,
        run_id     TEXT NOT NULL,
        trace_id   TEXT NOT NULL,
        latest_seq INTEGER NOT NULL,
        created    INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, run_id)
    )
    """,
    "CREATE INDEX IF NOT EXISTS runs_by_created ON runs (tenant_id, created)",
    "CREATE INDEX IF NOT EXISTS runs_by_trace ON runs (tenant_id, trace_id)",
)

_INSERT_CHECKPOINT = """
    INSERT INTO checkpoints (tenant_id, run_id, seq, phase, trace_id, state, saved_at)
    VALUES (?, ?, ?, ?, ?, ?, ?)
"""

_ADVANCE_RUN = """
    INSERT INTO runs (tenant_id, run_id, trace_id, latest_seq, created)
    VALUES (?, ?, ?, ?, (SELECT COALESCE(MAX(rowid), 0) + 1 FROM runs))
    ON CONFLICT (tenant_id, run_id)
    DO UPDATE SET trace_id = excluded.trace_id, latest_seq = excluded.latest_seq
    WHERE runs.latest_seq < excluded.latest_seq
"""
"""The run's row moves to the new seq only if it is newer: no row changed means stale.
``MAX(rowid)`` is one b-tree step, where ``MAX(created)`` would scan every run."""


class SqliteCheckpointStore:
    """Durable, dependency-free. Keeps every checkpoint, so a run's history can be inspected.

    ``save`` runs its stale check and its insert inside one ``BEGIN IMMEDIATE``
    transaction, which takes SQLite's write lock first: two writers, in threads or in
    separate processes sharing the file, cannot both pass the check, and the primary
    key ``(tenant_id, run_id, seq)`` backs it up. ``synchronous=FULL`` makes a
    returned ``save`` survive a power cut, not only a crash (inside a held commit
    group: once the group is flushed). WAL lets readers run beside the writer. One
    connection is shared between threads under a lock; open one store per process.
    Give several stores one :class:`~keelgate._sqlite.SqliteDatabase` (see
    :class:`keelgate.sqlite.SqliteStores`) and a loop groups their commits.

    ``":memory:"`` gives a private database that disappears with the store: useful in
    tests, useless for resume.
    """

    def __init__(self, path: str | Path | SqliteDatabase = ":memory:") -> None:
        self._db = open_store(path, _SCHEMA)
        self._path = self._db.path

    @property
    def commit_group(self) -> SqliteDatabase:
        """The database this store writes through (stores sharing it share commits)."""
        return self._db

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        return self._path

    def save(self, state: LoopState) -> None:
        """Insert ``state`` durably; raise :class:`StaleCheckpointError` unless it is newer."""
        text = state.to_json()
        saved_at = datetime.now(UTC).isoformat()
        key = (state.tenant_id, state.run_id)
        with self._db.write() as conn:
            advanced = conn.execute(_ADVANCE_RUN, (*key, state.trace_id, state.seq)).rowcount
            if advanced != 1:
                row = conn.execute("SELECT latest_seq FROM runs WHERE tenant_id = ? AND run_id = ?", key)
                latest = row.fetchone()[0]
                raise StaleCheckpointError(detail=f"{state.run_id} seq {state.seq} <= {latest}")
            conn.execute(
                _INSERT_CHECKPOINT,
                (*key, state.seq, str(state.phase), state.trace_id, text, saved_at),
            )

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The checkpoint with the highest seq, or None (also for another tenant's run)."""
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT state FROM checkpoints WHERE tenant_id = ? AND run_id = ? ORDER BY seq DESC LIMIT 1",
                (tenant_id, run_id),
            ).fetchone()
        return None if row is None else LoopState.from_json(row[0])

    def runs(self, tenant_id: str) -> list[str]:
        """The tenant's run ids in the order of their first save."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT run_id FROM runs WHERE tenant_id = ? ORDER BY created", (tenant_id,)
            ).fetchall()
        return [row[0] for row in rows]

    def history(self, tenant_id: str, run_id: str) -> list[LoopState]:
        """Every checkpoint of the run, lowest seq first (empty if absent)."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT state FROM checkpoints WHERE tenant_id = ? AND run_id = ? ORDER BY seq",
                (tenant_id, run_id),
            ).fetchall()
        return [LoopState.from_json(row[0]) for row in rows]

    def find_by_trace(self, tenant_id: str, trace_id: str) -> str | None:
        """The run whose latest checkpoint carries ``trace_id``, within the tenant.

        Trace ids are meant to be unique; if several runs share one, the one first
        saved most recently wins.
        """
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT run_id FROM runs WHERE tenant_id = ? AND trace_id = ? ORDER BY created DESC LIMIT 1",
                (tenant_id, trace_id),
            ).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        self._db.close()

    def __enter__(self) -> SqliteCheckpointStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteCheckpointStore({self._path!r})"
