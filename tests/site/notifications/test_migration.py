"""Migration 0003 keeps what existed: cursors stay where they were, email batches keep their state."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from notifications.models import ChainCursor, DeliveryStatus, EmailBatch

BEFORE = [("notifications", "0002_email")]
AFTER = [("notifications", "0003_channels")]


@pytest.fixture(autouse=True)
def _latest_after():
    """Each test stops at 0003; the next test in this process needs every later migration back."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.mark.django_db(transaction=True)
def test_cursors_and_batches_survive_the_move_to_the_shared_engine():
    """Cursors keep their place and held items; batches sent, skipped, given up, claimed keep their state."""
    old = migrate(BEFORE)
    try:
        Tenant = old.get_model("tenants", "Tenant")
        User = old.get_model("auth", "User")
        tenant = Tenant.objects.create(slug="m1", name="M1")
        user = User.objects.create(username="mig", email="mig@example.test")
        endpoint = old.get_model("notifications", "WebhookEndpoint").objects.create(
            tenant=tenant, url="http://127.0.0.1:9/", secret="whsec_x"
        )
        old.get_model("notifications", "WebhookCursor").objects.create(endpoint=endpoint, seq=41)
        held = [{"kind": "unknown", "run_id": "u", "action_id": "a", "since": "2026-12-01T00:00:00+00:00"}]
        old.get_model("notifications", "EmailCursor").objects.create(tenant_id="m1", seq=7, unresolved=held)
        now = datetime.now(UTC)
        Batch = old.get_model("notifications", "EmailBatch")
        for outcome, token, finished in [
            ("sent", "", now),
            ("nothing_left", "", now),
            ("gave_up", "", now),
            ("", "tok", None),
            ("", "", None),
        ]:
            Batch.objects.create(
                user=user,
                items=[],
                created_at=now,
                due_at=now,
                outcome=outcome,
                claim_token=token,
                claimed_until=now if token else None,
                finished_at=finished,
            )
    finally:
        migrate(AFTER)

    webhook = ChainCursor.objects.get(channel="webhooks", subscriber=str(endpoint.pk))
    assert (webhook.tenant_id, webhook.seq, webhook.held) == ("m1", 41, [])
    email = ChainCursor.objects.get(channel="email", subscriber="m1")
    assert (email.tenant_id, email.seq, email.held) == ("m1", 7, held)
    statuses = list(EmailBatch.objects.order_by("pk").values_list("status", "lease_token", "next_attempt_at"))
    assert [s for s, _, _ in statuses] == [
        DeliveryStatus.DELIVERED,
        DeliveryStatus.SKIPPED,
        DeliveryStatus.FAILED,
        DeliveryStatus.DELIVERING,
        DeliveryStatus.PENDING,
    ]
    assert statuses[3][1] == "tok" and all(at == now for _, _, at in statuses)


@pytest.mark.django_db(transaction=True)
def test_the_move_back_keeps_live_cursors_and_drops_a_deleted_endpoints():
    """Migrating back to 0002 restores each live endpoint's cursor; a deleted endpoint's cursor
    (which the shared table keeps) is dropped, as the old one-to-one cursor was with it."""
    from notifications.models import WebhookEndpoint
    from tenants.models import Tenant

    tenant = Tenant.objects.create(slug="m2", name="M2")
    kept = WebhookEndpoint.objects.create(tenant=tenant, url="http://127.0.0.1:9/a", secret="whsec_a")
    gone = WebhookEndpoint.objects.create(tenant=tenant, url="http://127.0.0.1:9/b", secret="whsec_b")
    for endpoint, seq in ((kept, 5), (gone, 9)):
        ChainCursor.objects.create(channel="webhooks", subscriber=str(endpoint.pk), tenant_id="m2", seq=seq)
    gone.delete()
    try:
        old = migrate(BEFORE)
        cursors = old.get_model("notifications", "WebhookCursor").objects.values_list("endpoint_id", "seq")
        assert list(cursors) == [(kept.pk, 5)]
    finally:
        migrate(AFTER)
