"""Counters counted where things happen: a broken chain's verification, a failed webhook attempt."""

from __future__ import annotations

from prometheus_client import REGISTRY

from audit.models import AuditEvent
from audit.selectors import audit_verify
from audit.store import DjangoAuditLog
from notifications.models import WebhookAttempt
from notifications.webhooks.delivery import deliver_due
from notifications.webhooks.services import webhook_endpoint_register
from runs.engine.worker import Worker
from runs.services import run_start
from tenants.models import Tenant


def sample(name: str, **labels: str) -> float:
    """This process's value of one sample (0 before its first increment)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_broken_chain_counts_one_verify_failure_and_a_sound_one_none(transactional_db):
    """audit_verify adds one to keelgate_audit_verify_failures_total per broken report only."""
    log = DjangoAuditLog()
    for n in range(3):
        log.append("t9", actor="test", kind="test.event", body={"n": n})
    appended = sample("keelgate_audit_appends_total", kind="test.event")
    assert appended >= 3  # counted on commit (other tests of this process may have added more)
    before = sample("keelgate_audit_verify_failures_total")
    assert audit_verify(tenant_id="t9").ok
    assert sample("keelgate_audit_verify_failures_total") == before
    AuditEvent.objects.filter(tenant_id="t9", seq=2).update(body='{"n":99}')
    assert not audit_verify(tenant_id="t9").ok
    assert sample("keelgate_audit_verify_failures_total") == before + 1


def test_a_failed_webhook_attempt_counts_as_a_retry(operator, settings, brokerage_path):
    """A receiver that refuses the connection: one attempt with result retry per delivery."""
    settings.KEELGATE_WEBHOOK_ALLOW_PRIVATE = True
    webhook_endpoint_register(tenant=Tenant.objects.get(slug="t1"), url="http://127.0.0.1:9/", actor="op")
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id="hooked")
    worker = Worker(lease_seconds=30)
    assert worker.run_once()  # the run waits for approval: approval.requested, a webhook event
    worker.close()
    before = sample("keelgate_webhook_attempts_total", result="retry")
    delivered = sample("keelgate_webhook_attempts_total", result="delivered")
    assert deliver_due() == 0  # nothing delivered: the port refuses
    attempted = WebhookAttempt.objects.count()
    assert attempted > 0
    assert sample("keelgate_webhook_attempts_total", result="retry") == before + attempted
    assert sample("keelgate_webhook_attempts_total", result="delivered") == delivered
