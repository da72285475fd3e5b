"""The checkpoint store contract, run against the in-memory and SQLite stores."""

from __future__ import annotations

import sqlite3
import sys
import types
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keelgate import checkpoint
from keelgate.checkpoint import (
    HistoryCheckpointStore,
    InMemoryCheckpointStore,
    SqliteCheckpointStore,
    default_checkpointer,
)
from keelgate.errors import StaleCheckpointError
from keelgate.loop import LoopState
from keelgate.testing.contract.checkpoint import HistoryCheckpointStoreContract, HistoryStoreFactory


class TestInMemoryCheckpointStore(HistoryCheckpointStoreContract):
    """Every handle is the same instance: there is no other storage to reopen."""

    @pytest.fixture
    def make_store(self) -> HistoryStoreFactory:
        store = InMemoryCheckpointStore()
        return lambda: store


class TestSqliteCheckpointStore(HistoryCheckpointStoreContract):
    """Every handle is a new connection to the same file."""

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Iterator[HistoryStoreFactory]:
        opened: list[SqliteCheckpointStore] = []

        def make() -> SqliteCheckpointStore:
            store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()


# What the SQLite store and the module promise beyond the protocol. (Kept here because
# this brief owns only this file; they belong in tests/unit and tests/integration.)

_AS_OF = datetime(2025, 3, 1, tzinfo=UTC)


def _state(tenant_id: str, run_id: str, seq: int, trace_id: str = "trace-1") -> LoopState:
    return LoopState(
        tenant_id=tenant_id,
        run_id=run_id,
        agent_id="agent-1",
        goal="goal",
        as_of=_AS_OF,
        trace_id=trace_id,
        seq=seq,
    )


class TestSqliteCheckpointStoreExtras:
    """find_by_trace, the stored columns and pragmas, closing, and ``:memory:``."""

    def test_find_by_trace_returns_the_run_within_the_tenant(self, tmp_path: Path) -> None:
        """find_by_trace finds the run by the trace id of its latest state, per tenant."""
        with SqliteCheckpointStore(tmp_path / "c.db") as store:
            store.save(_state("t1", "run-a", 1, trace_id="trace-a"))
            store.save(_state("t1", "run-b", 1, trace_id="trace-b"))
            assert store.find_by_trace("t1", "trace-a") == "run-a"
            assert store.find_by_trace("t1", "trace-b") == "run-b"
            assert store.find_by_trace("t2", "trace-a") is None
            assert store.find_by_trace("t1", "trace-missing") is None

    def test_find_by_trace_follows_the_latest_state(self, tmp_path: Path) -> None:
        """After a save under a new trace id, only the new one finds the run."""
        with SqliteCheckpointStore(tmp_path / "c.db") as store:
            store.save(_state("t1", "run-a", 1, trace_id="old"))
            store.save(_state("t1", "run-a", 2, trace_id="new"))
            assert store.find_by_trace("t1", "new") == "run-a"
            assert store.find_by_trace("t1", "old") is None

    def test_stale_detail_names_the_run_and_both_seqs(self, tmp_path: Path) -> None:
        """The refusal's detail is '<run> seq <refused> <= <latest>'."""
        with SqliteCheckpointStore(tmp_path / "c.db") as store:
            store.save(_state("t1", "run-a", 4))
            with pytest.raises(StaleCheckpointError) as caught:
                store.save(_state("t1", "run-a", 3))
        assert caught.value.detail == "run-a seq 3 <= 4"

    def test_file_is_wal_with_phase_and_trace_columns(self, tmp_path: Path) -> None:
        """The file is in WAL mode and each row carries seq, phase, trace id and the deflated JSON.

        A run's first checkpoint is a keyframe: zlib alone inflates it to the saved JSON.
        """
        path = tmp_path / "c.db"
        with SqliteCheckpointStore(path) as store:
            store.save(_state("t1", "run-a", 1))
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            row = conn.execute(
                "SELECT tenant_id, run_id, seq, phase, trace_id, state, saved_at, data, base_seq"
                " FROM checkpoints"
            ).fetchone()
        finally:
            conn.close()
        assert row[:5] == ("t1", "run-a", 1, "plan", "trace-1")
        assert (row[5], row[8]) == ("", None)
        assert zlib.decompress(row[7]).decode() == _state("t1", "run-a", 1).to_json()
        assert datetime.fromisoformat(row[6]).tzinfo is not None

    def test_memory_stores_are_private(self) -> None:
        """Two ':memory:' stores share nothing."""
        with SqliteCheckpointStore() as a, SqliteCheckpointStore(":memory:") as b:
            a.save(_state("t1", "run-a", 1))
            assert b.load("t1", "run-a") is None
            assert a.path == ":memory:"

    def test_a_closed_store_refuses_use(self, tmp_path: Path) -> None:
        """After close, operations raise instead of silently doing nothing."""
        store = SqliteCheckpointStore(tmp_path / "c.db")
        store.close()
        with pytest.raises(sqlite3.ProgrammingError):
            store.load("t1", "run-a")


class TestDefaultCheckpointer:
    """default_checkpointer picks the LangGraph store when present, else SQLite."""

    def test_without_the_langgraph_extra_it_is_sqlite(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With keelgate.contrib.langgraph unimportable, the result is a SqliteCheckpointStore."""
        monkeypatch.setitem(sys.modules, "keelgate.contrib.langgraph", None)
        store = default_checkpointer(tmp_path / "c.db")
        assert isinstance(store, SqliteCheckpointStore)
        assert store.path == str(tmp_path / "c.db")
        store.close()

    def test_with_the_langgraph_extra_it_is_the_langgraph_store(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With the contrib module importable, its LangGraphCheckpointStore.sqlite(path) is used."""
        made: list[object] = []

        class FakeStore(InMemoryCheckpointStore):
            @classmethod
            def sqlite(cls, path: object) -> FakeStore:
                made.append(path)
                return cls()

        module = types.ModuleType("keelgate.contrib.langgraph")
        module.LangGraphCheckpointStore = FakeStore  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "keelgate.contrib.langgraph", module)
        store = default_checkpointer(tmp_path / "c.db")
        assert isinstance(store, FakeStore)
        assert made == [tmp_path / "c.db"]

    def test_the_package_exports(self) -> None:
        """keelgate.checkpoint exports exactly its documented names."""
        assert sorted(checkpoint.__all__) == [
            "CheckpointCodec",
            "CheckpointStore",
            "EncodedCheckpoint",
            "HistoryCheckpointStore",
            "InMemoryCheckpointStore",
            "SqliteCheckpointStore",
            "StoredCheckpoint",
            "default_checkpointer",
        ]
        assert isinstance(InMemoryCheckpointStore(), HistoryCheckpointStore)
        with SqliteCheckpointStore() as store:
            assert isinstance(store, HistoryCheckpointStore)
