"""The default durable checkpoint store: one SQLite file, standard library only."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from keelgate._sqlite import SqliteDatabase, open_store
from keelgate._state import LoopState
from keelgate.checkpoint._codec import CheckpointCodec, StoredCheckpoint
from keelgate.errors import CheckpointUnreadableError, StaleCheckpointError

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
        data      BLOB,
        base_seq  INTEGER,
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

_COLUMNS = (("data", "BLOB"), ("base_seq", "INTEGER"))
"""Added to files made before checkpoints were encoded (their rows keep plain JSON in ``state``)."""

_INSERT_CHECKPOINT = """
    INSERT INTO checkpoints (tenant_id, run_id, seq, phase, trace_id, state, saved_at, data, base_seq)
    VALUES (?, ?, ?, ?, ?, '', ?, ?, NULL)
"""

_INSERT_DELTA = """
    INSERT INTO checkpoints (tenant_id, run_id, seq, phase, trace_id, state, saved_at, data, base_seq)
    SELECT ?1, ?2, ?3, ?4, ?5, '', ?6, ?7, ?8
    WHERE EXISTS (
        SELECT 1 FROM checkpoints
        WHERE tenant_id = ?1 AND run_id = ?2 AND seq = ?8 AND substr(data, -4) = ?9
    )
"""
"""A delta, only if its base is stored and holds the text it was deflated against (same Adler-32)."""

_CHAIN = """
    SELECT seq, base_seq, data, state FROM checkpoints
    WHERE tenant_id = ?1 AND run_id = ?2 AND seq >= COALESCE(
        (SELECT MAX(seq) FROM checkpoints WHERE tenant_id = ?1 AND run_id = ?2 AND base_seq IS NULL), 0
    )
    ORDER BY seq
"""
"""The rows a load decodes: from the run's newest keyframe on."""

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

    Each row holds its JSON deflated against the run's previous checkpoint (see
    :class:`~keelgate.checkpoint.CheckpointCodec`); ``load`` and ``history`` give back
    the saved JSON exactly, and rows of older files (plain JSON) still read.

    ``":memory:"`` gives a private database that disappears with the store: useful in
    tests, useless for resume.
    """

    def __init__(self, path: str | Path | SqliteDatabase = ":memory:") -> None:
        self._db = open_store(path, _SCHEMA)
        self._path = self._db.path
        self._codec = CheckpointCodec()
        with self._db.write() as conn:
            have = {row[1] for row in conn.execute("PRAGMA table_info(checkpoints)")}
            for name, kind in _COLUMNS:
                if name not in have:
                    conn.execute(f"ALTER TABLE checkpoints ADD COLUMN {name} {kind}")

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
        encoded = self._codec.encode(*key, state.seq, text)
        with self._db.write() as conn:
            advanced = conn.execute(_ADVANCE_RUN, (*key, state.trace_id, state.seq)).rowcount
            if advanced != 1:
                self._codec.forget(*key)
                row = conn.execute("SELECT latest_seq FROM runs WHERE tenant_id = ? AND run_id = ?", key)
                latest = row.fetchone()[0]
                raise StaleCheckpointError(detail=f"{state.run_id} seq {state.seq} <= {latest}")
            columns = (*key, state.seq, str(state.phase), state.trace_id, saved_at)
            if encoded.base_seq is not None:
                params = (*columns, encoded.data, encoded.base_seq, encoded.base_tail)
                if conn.execute(_INSERT_DELTA, params).rowcount == 1:
                    return
                # The memo's base is not stored (a save of a rolled-back transaction).
                data = self._codec.keyframe(*key, state.seq, text)
            else:
                data = encoded.data
            conn.execute(_INSERT_CHECKPOINT, (*columns, data))

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The checkpoint with the highest seq, or None (also for another tenant's run)."""
        with self._db.read() as conn:
            rows = conn.execute(_CHAIN, (tenant_id, run_id)).fetchall()
        try:
            texts = self._codec.decode(tenant_id, run_id, map(_stored, rows))
        except CheckpointUnreadableError:
            # A delta based below the newest keyframe (only after a racing foreign
            # write): decode the whole run instead; a damaged row raises again.
            texts = self._texts(tenant_id, run_id)
        return LoopState.from_json(texts[-1]) if texts else None

    def runs(self, tenant_id: str) -> list[str]:
        """The tenant's run ids in the order of their first save."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT run_id FROM runs WHERE tenant_id = ? ORDER BY created", (tenant_id,)
            ).fetchall()
        return [row[0] for row in rows]

    def history(self, tenant_id: str, run_id: str) -> list[LoopState]:
        """Every checkpoint of the run, lowest seq first (empty if absent)."""
        return [LoopState.from_json(text) for text in self._texts(tenant_id, run_id)]

    def _texts(self, tenant_id: str, run_id: str) -> list[str]:
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT seq, base_seq, data, state FROM checkpoints"
                " WHERE tenant_id = ? AND run_id = ? ORDER BY seq",
                (tenant_id, run_id),
            ).fetchall()
        return self._codec.decode(tenant_id, run_id, map(_stored, rows))

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


def _stored(row: tuple[int, int | None, bytes | None, str]) -> StoredCheckpoint:
    return StoredCheckpoint(row[0], row[1], row[2], row[3])
