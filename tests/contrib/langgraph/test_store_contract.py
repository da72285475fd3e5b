"""The LangGraph-backed store runs the same contract suite as every other store."""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest

from keelgate.contrib.langgraph import LangGraphCheckpointStore
from keelgate.testing.contract.checkpoint import HistoryCheckpointStoreContract

PG_URL = os.environ.get("KEELGATE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


class TestLangGraphSqliteStore(HistoryCheckpointStoreContract):
    """LangGraph's SqliteSaver, one connection per handle over one file."""

    @pytest.fixture
    def make_store(self, tmp_path):
        opened: list[LangGraphCheckpointStore] = []

        def make() -> LangGraphCheckpointStore:
            store = LangGraphCheckpointStore.sqlite(tmp_path / "lg.sqlite3")
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()


def _postgres_reachable() -> bool:
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
        return True
    except psycopg.Error:
        return False


@pytest.fixture
def pg_schema_url():
    """A fresh PostgreSQL schema for LangGraph's tables, dropped afterwards."""
    if not _postgres_reachable():
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required in CI at {PG_URL}")
        pytest.skip("PostgreSQL not reachable")
    schema = f"lg_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


class TestLangGraphPostgresStore(HistoryCheckpointStoreContract):
    """LangGraph's PostgresSaver; handles share one store (its lock is per process)."""

    @pytest.fixture
    def make_store(self, pg_schema_url):
        store = LangGraphCheckpointStore.postgres(pg_schema_url)
        yield lambda: store
        store.close()
