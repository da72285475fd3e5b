"""A CheckpointStore kept in a LangGraph checkpoint saver (SQLite or PostgreSQL).

The saver is used as a store only: each LoopState is one LangGraph checkpoint of the
thread ``<tenant>/<run>`` whose single channel ``keelgate_state`` holds the very JSON
the other stores hold, so a run can move between them.

Known gap (ADR-0004): the saver API has no conditional write, so the stale-writer check
is a read-then-write. A lock makes it safe between threads; ``.sqlite(path)`` also takes
a cross-process lock (a separate lock file held under ``BEGIN IMMEDIATE``) around it.
A saver shared by several processes on PostgreSQL has no such lock: use the Django
store's unique constraint there.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint

from keelgate._sqlite import enable_wal
from keelgate._state import LoopState
from keelgate.errors import StaleCheckpointError

__all__ = ["LangGraphCheckpointStore"]

CHANNEL = "keelgate_state"
NAMESPACE = "keelgate"


def _checkpoint_id(seq: int) -> str:
    """Savers return the greatest id as the latest, so ids sort as the sequence does."""
    return f"{seq:020d}"


class _FileLock:
    """A cross-process lock: an IMMEDIATE transaction on a separate SQLite file."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)

    @contextmanager
    def held(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            self._db.execute("ROLLBACK")

    def close(self) -> None:
        self._db.close()


class LangGraphCheckpointStore:
    """Keelgate checkpoints in any LangGraph ``BaseCheckpointSaver``; keeps history."""

    race_delay: float = 0.0
    """Seconds to sleep between the stale check and the write. Tests widen the window
    with it to prove the lock is what prevents a lost update."""

    def __init__(self, saver: BaseCheckpointSaver[Any], *, process_lock: _FileLock | None = None) -> None:
        self.saver = saver
        self._thread_lock = threading.Lock()
        self._process_lock = process_lock
        self._closers: list[AbstractContextManager[Any]] = []

    @classmethod
    def sqlite(cls, path: str | Path, *, cross_process_lock: bool = True) -> LangGraphCheckpointStore:
        """A store on LangGraph's SQLite saver, with the cross-process lock of the ADR."""
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=60)
        enable_wal(conn)
        saver = SqliteSaver(conn)
        saver.setup()
        lock = _FileLock(f"{path}.lock") if cross_process_lock and str(path) != ":memory:" else None
        store = cls(saver, process_lock=lock)
        store._closers.append(_Closing(conn))
        return store

    @classmethod
    def postgres(cls, conn_string: str) -> LangGraphCheckpointStore:
        """A store on LangGraph's PostgreSQL saver (thread-safe; no cross-process lock)."""
        from langgraph.checkpoint.postgres import PostgresSaver

        manager = PostgresSaver.from_conn_string(conn_string)
        saver = manager.__enter__()
        saver.setup()
        store = cls(saver)
        store._closers.append(manager)
        return store

    def close(self) -> None:
        """Close what this store opened."""
        for closer in reversed(self._closers):
            closer.__exit__(None, None, None)
        self._closers.clear()
        if self._process_lock is not None:
            self._process_lock.close()

    # -- CheckpointStore ------------------------------------------------------------

    def save(self, state: LoopState) -> None:
        """Write a newer checkpoint; refuse one that is not newer (under the locks)."""
        process = self._process_lock.held() if self._process_lock else nullcontext()
        with self._thread_lock, process:
            latest = self._latest_seq(state.tenant_id, state.run_id)
            if latest is not None and latest >= state.seq:
                raise StaleCheckpointError(f"{state.run_id} seq {state.seq} <= {latest}")
            if self.race_delay:
                time.sleep(self.race_delay)
            checkpoint = empty_checkpoint()
            checkpoint["id"] = _checkpoint_id(state.seq)
            checkpoint["channel_values"] = {CHANNEL: state.to_json()}
            checkpoint["channel_versions"] = {CHANNEL: state.seq}
            metadata: Any = {
                "source": "update",
                "step": state.seq,
                "tenant_id": state.tenant_id,
                "run_id": state.run_id,
                "trace_id": state.trace_id,
                "seq": state.seq,
            }
            self.saver.put(
                self._config(state.tenant_id, state.run_id), checkpoint, metadata, {CHANNEL: state.seq}
            )

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The newest checkpoint of the run, or None."""
        found = self.saver.get_tuple(self._config(tenant_id, run_id))
        if found is None:
            return None
        return LoopState.from_json(found.checkpoint["channel_values"][CHANNEL])

    def runs(self, tenant_id: str) -> list[str]:
        """The tenant's run ids, oldest first (by first checkpoint)."""
        first_seen: dict[str, int] = {}
        for item in self.saver.list(None, filter={"tenant_id": tenant_id}):
            meta: dict[str, Any] = dict(item.metadata or {})
            run_id, seq = str(meta.get("run_id")), int(meta.get("seq") or 0)
            if item.config["configurable"].get("checkpoint_ns") != NAMESPACE:
                continue
            first_seen[run_id] = min(seq, first_seen.get(run_id, seq))
        order = {run_id: i for i, run_id in enumerate(self._creation_order(tenant_id, first_seen))}
        return sorted(first_seen, key=lambda r: order.get(r, 0))

    def history(self, tenant_id: str, run_id: str) -> list[LoopState]:
        """Every checkpoint of the run, oldest first."""
        items = list(self.saver.list(self._config(tenant_id, run_id)))
        states = [LoopState.from_json(i.checkpoint["channel_values"][CHANNEL]) for i in items]
        return sorted(states, key=lambda s: s.seq)

    def find_by_trace(self, tenant_id: str, trace_id: str) -> str | None:
        """The run id with that trace id, within one tenant."""
        for item in self.saver.list(None, filter={"tenant_id": tenant_id, "trace_id": trace_id}):
            return str((item.metadata or {}).get("run_id"))
        return None

    # -- helpers --------------------------------------------------------------------

    def _creation_order(self, tenant_id: str, runs: dict[str, int]) -> list[str]:
        """Runs ordered by the wall time of their first checkpoint."""
        stamps: dict[str, str] = {}
        for run_id in runs:
            items = list(self.saver.list(self._config(tenant_id, run_id)))
            if items:
                stamps[run_id] = min(str(i.checkpoint.get("ts", "")) for i in items)
        return sorted(stamps, key=lambda r: (stamps[r], r))

    def _latest_seq(self, tenant_id: str, run_id: str) -> int | None:
        found = self.saver.get_tuple(self._config(tenant_id, run_id))
        if found is None:
            return None
        return int(found.checkpoint["channel_versions"][CHANNEL])

    @staticmethod
    def _config(tenant_id: str, run_id: str) -> Any:
        return {"configurable": {"thread_id": f"{tenant_id}/{run_id}", "checkpoint_ns": NAMESPACE}}


class _Closing(AbstractContextManager[Any]):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __exit__(self, *exc: object) -> None:
        self._conn.close()
