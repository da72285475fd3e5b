"""ApiIdempotencyKey moved from ``tenants`` to ``runs`` (tenants/0003, runs/0006) with its rows.

The test migrates the database back to before the move, writes a key as the old code
did, migrates forward and reads it through the new model (its content type moved
too), then back again.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs.models import ApiIdempotencyKey
from tenants.models import Tenant

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("tenants", "0002_apikey"), ("runs", "0005_checkpoint_encoding")]
AFTER = [("tenants", "0003_apiidempotencykey_to_runs"), ("runs", "0006_apiidempotencykey")]


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    """Migrate to ``targets`` and return an executor that knows the new state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor


def test_a_key_written_before_the_move_is_read_after_it_and_survives_the_way_back():
    """A row in tenants' table before the move is the same row of runs.ApiIdempotencyKey after."""
    tenant = Tenant.objects.create(slug="t1")
    user = get_user_model().objects.create_user("op")
    created = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    try:
        old = migrate(BEFORE).loader.project_state(BEFORE).apps.get_model("tenants", "ApiIdempotencyKey")
        assert old._meta.db_table == "tenants_apiidempotencykey"
        old.objects.create(
            tenant_id=tenant.pk,
            user_id=user.pk,
            key="k-1",
            fingerprint="f" * 64,
            run_id="r1",
            created_at=created,
        )
        # An old database's content type is the tenants app's (the test database was born after the move).
        ContentType.objects.filter(model="apiidempotencykey").update(app_label="tenants")
        migrate(AFTER)
        ContentType.objects.clear_cache()
        row = ApiIdempotencyKey.objects.get()
        assert (row.tenant, row.user, row.key, row.run_id, row.created_at) == (
            tenant,
            user,
            "k-1",
            "r1",
            created,
        )
        tables = connection.introspection.table_names()
        assert "runs_apiidempotencykey" in tables and "tenants_apiidempotencykey" not in tables
        labels = ContentType.objects.filter(model="apiidempotencykey").values_list("app_label", flat=True)
        assert list(labels) == ["runs"]

        back = migrate(BEFORE).loader.project_state(BEFORE).apps.get_model("tenants", "ApiIdempotencyKey")
        assert back.objects.get().key == "k-1"
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    assert ApiIdempotencyKey.objects.get().key == "k-1"
