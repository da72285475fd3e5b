"""The Django stores run the engine's contract suites unchanged, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from audit.store import DjangoAuditLog
from audit.store_postgresql import PostgresAuditLog
from audit.verification import verify_log
from keelgate.testing.contract.audit import AuditLogContract
from keelgate.testing.contract.checkpoint import HistoryCheckpointStoreContract
from keelgate.testing.contract.idempotency import IdempotencyStoreContract
from runs.engine.stores import DjangoCheckpointStore, DjangoIdempotencyStore
from runs.engine.stores_postgresql import PostgresCheckpointStore, PostgresIdempotencyStore
from sitekit.postgresql.commits import PostgresCommitGroup
from tests.site.runs._batch import require_postgres


class TestDjangoCheckpointStore(HistoryCheckpointStoreContract):
    """Checkpoints in the ORM."""

    @pytest.fixture
    def make_store(self, transactional_db):
        return DjangoCheckpointStore


class TestDjangoIdempotencyStore(IdempotencyStoreContract):
    """Idempotency keys in the ORM."""

    @pytest.fixture
    def make_store(self, transactional_db):
        return DjangoIdempotencyStore


class TestDjangoAuditLog(AuditLogContract):
    """The audit log in the ORM: a Merkle tree per tenant, verified by the site's walk."""

    @pytest.fixture
    def make_log(self, transactional_db):
        return DjangoAuditLog

    def log_verifies(self, log, tenant_id):
        return verify_log(tenant_id=tenant_id).ok


class TestPostgresAuditLog(AuditLogContract):
    """The audit log by PostgreSQL's own statements (``audit.store_postgresql``)."""

    @pytest.fixture
    def make_log(self, transactional_db):
        require_postgres("the PostgreSQL implementation")
        return PostgresAuditLog

    def log_verifies(self, log, tenant_id):
        return verify_log(tenant_id=tenant_id).ok


def _postgresql(store: type) -> object:
    """A factory of ``store`` (a PostgreSQL store) on a PostgreSQL commit group of its own."""

    def make(*args: object, **kwargs: object) -> object:
        return store(*args, group=PostgresCommitGroup(), **kwargs)

    return make


class TestPostgresCheckpointStore(HistoryCheckpointStoreContract):
    """Checkpoints by PostgreSQL's own statements (``runs.engine.stores_postgresql``)."""

    @pytest.fixture
    def make_store(self, transactional_db):
        require_postgres("the PostgreSQL implementation")
        return _postgresql(PostgresCheckpointStore)


class TestPostgresIdempotencyStore(IdempotencyStoreContract):
    """Idempotency keys by PostgreSQL's own statements."""

    @pytest.fixture
    def make_store(self, transactional_db):
        require_postgres("the PostgreSQL implementation")
        return _postgresql(PostgresIdempotencyStore)
