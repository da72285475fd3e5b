"""Counters counted where things happen: a broken chain's verification, a failed webhook attempt."""

from __future__ import annotations

from prometheus_client import REGISTRY

from audit.models import AuditEvent
from audit.selectors import audit_verify
from audit.wiring import audit_log
from notifications.models import WebhookAttempt
from notifications.webhooks import deliver_due
from notifications.webhooks.services import webhook_endpoint_register
from runs.engine.worker import Worker
from runs.services import run_start
from tenants.models import Tenant


def sample(name: str, **labels: str) -> float:
    """This process's value of one sample (0 before its first increment)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_broken_chain_counts_one_verify_failure_and_a_sound_one_none(transactional_db):
    """audit_verify adds one to keelgate_audit_verify_failures_total per broken report only."""
    log = audit_log()
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


def test_a_worker_whose_lease_was_taken_over_counts_a_lease_loss_and_a_refused_write(
    operator, brokerage_path
):
    """Worker A's claim is taken over by B; A's first write is refused: one loss, one refusal, no order."""
    from datetime import timedelta

    from django.utils import timezone

    from approvals.models import Approval
    from approvals.services import approval_decide
    from runs.agents.brokerage import PaperBrokerage
    from runs.models import Run

    run_start(tenant_id="t1", agent="paper-trader", goal="buy 7 ACME", user=operator, run_id="taken")
    first = Worker(lease_seconds=30)
    while first.run_once():
        pass
    approval = Approval.objects.get(tenant_id="t1", run_id="taken")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="go")
    worker_a, worker_b = (
        Worker(lease_seconds=30, owner="worker-a"),
        Worker(lease_seconds=30, owner="worker-b"),
    )
    claim_a = worker_a.claim()
    assert claim_a is not None
    Run.objects.filter(pk=claim_a.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert worker_b.claim() is not None  # B owns the run now (the epoch moved on)
    losses = sample("keelgate_lease_losses_total")
    refused = sample("keelgate_fenced_writes_refused_total")
    worker_a.execute(claim_a)
    assert sample("keelgate_lease_losses_total") == losses + 1
    assert sample("keelgate_fenced_writes_refused_total") == refused + 1
    assert PaperBrokerage().ledger() == []  # A's order never reached the brokerage
