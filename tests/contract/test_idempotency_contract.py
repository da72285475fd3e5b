"""The idempotency store contract, run against the in-memory and the SQLite store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keelgate.idempotency import (
    IdempotencyStore,
    InMemoryIdempotencyStore,
    SqliteIdempotencyStore,
)
from keelgate.testing.contract.idempotency import IdempotencyStoreContract, KeyStoreFactory


class TestInMemoryIdempotencyStore(IdempotencyStoreContract):
    """The in-memory store: every handle is the same instance."""

    @pytest.fixture
    def make_store(self) -> KeyStoreFactory:
        store = InMemoryIdempotencyStore()
        return lambda: store


class TestSqliteIdempotencyStore(IdempotencyStoreContract):
    """The SQLite store: every handle is a new connection to one file."""

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Iterator[KeyStoreFactory]:
        opened: list[SqliteIdempotencyStore] = []

        def open_store() -> IdempotencyStore:
            store = SqliteIdempotencyStore(tmp_path / "keys.sqlite3")
            opened.append(store)
            return store

        yield open_store
        for store in opened:
            store.close()


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IdempotencyStore]:
    if request.param == "memory":
        yield InMemoryIdempotencyStore()
        return
    with SqliteIdempotencyStore(tmp_path / "keys.sqlite3") as store:
        yield store


def test_stores_satisfy_the_protocol(any_store: IdempotencyStore) -> None:
    """Both stores are IdempotencyStore instances at runtime."""
    assert isinstance(any_store, IdempotencyStore)


def test_naive_now_is_refused(any_store: IdempotencyStore) -> None:
    """A naive datetime is refused before anything is stored: it would not read back aware."""
    with pytest.raises(ValueError, match="timezone-aware"):
        any_store.claim(
            "t",
            "k",
            owner="w",
            run_id="r",
            action_id="a",
            now=datetime(2025, 1, 1),  # naive on purpose
            lease_seconds=1.0,
        )
    assert any_store.get("t", "k") is None


def test_sqlite_store_survives_close_and_reopen(tmp_path: Path) -> None:
    """A record committed before close() is read by a store opened on the file afterwards."""
    path = tmp_path / "keys.sqlite3"
    now = datetime(2025, 1, 1, tzinfo=UTC)
    with SqliteIdempotencyStore(path) as store:
        store.claim("t", "k", owner="w", run_id="r", action_id="a", now=now, lease_seconds=5)
        done = store.complete("t", "k", owner="w", outcome='{"ok":1}', now=now)
    with SqliteIdempotencyStore(path) as reopened:
        assert reopened.get("t", "k") == done


def test_sqlite_store_uses_wal_and_full_sync(tmp_path: Path) -> None:
    """The SQLite file is in WAL mode, so readers never block the writer that commits."""
    path = tmp_path / "keys.sqlite3"
    SqliteIdempotencyStore(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()
