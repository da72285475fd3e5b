"""Real runs of the paper trader that make every webhook event happen, and helpers to drive delivery."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from approvals.models import Approval, UnknownOutcome
from approvals.services import approval_decide, unknown_reconcile
from audit.wiring import audit_log
from notifications.models import DeliveryStatus, WebhookDelivery
from notifications.webhooks import deliver_due
from runs.agents.brokerage import PaperBrokerage
from runs.engine.worker import Worker
from runs.services import run_start

SECRET_ARGUMENT = "ACME"
"""The symbol every order names: a payload without opt-in must not contain it."""


def drain() -> None:
    worker = Worker()
    while worker.run_once():
        pass


def waiting(op, run_id: str, goal: str = "buy 10 ACME") -> Approval:
    """A run of t1 whose order waits for approval."""
    run_start(tenant_id="t1", agent="paper-trader", goal=goal, user=op, run_id=run_id)
    drain()
    return Approval.objects.get(tenant_id="t1", run_id=run_id)


def every_event(op) -> None:
    """Make each webhook event happen at least once in t1, through the real services.

    r-ok: requested, approved, finished (done). r-deny: requested, denied, finished.
    r-unk: requested, approved, outcome unknown, settled, finished. r-exp: requested,
    then an ``approval.expiring`` appended with the body the engine's expiry warning
    writes (its deadline is hours away, so the sweep would not warn yet).
    """
    approval = waiting(op, "r-ok", "buy 3 ACME")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve", note="go")
    drain()

    approval = waiting(op, "r-deny", "buy 4 ACME")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="deny", note="not today")
    drain()

    approval = waiting(op, "r-unk", "buy 5 ACME")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve", note="go")
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    unknown = UnknownOutcome.objects.get(tenant_id="t1", run_id="r-unk")
    unknown_reconcile(tenant_id="t1", item_id=unknown.pk, user=op, executed=True, note="ledger says yes")
    drain()

    approval = waiting(op, "r-exp", "buy 6 ACME")
    expires = datetime.now(UTC) + timedelta(minutes=10)
    audit_log().append(
        "t1",
        actor="keelgate:reminders",
        kind="approval.expiring",
        body={
            "run_id": "r-exp",
            "action_id": approval.action_id,
            "tool": approval.tool,
            "expires_at": expires.isoformat(),
            "escalates_to": "admin",
        },
    )


def deliver_until_settled(timeout: float = 60.0) -> int:
    """Run delivery passes until no delivery is pending or in flight; the passes it took."""
    deadline = time.monotonic() + timeout
    passes = 0
    while time.monotonic() < deadline:
        deliver_due()
        passes += 1
        open_ = WebhookDelivery.objects.filter(
            status__in=[DeliveryStatus.PENDING, DeliveryStatus.DELIVERING]
        ).exists()
        if not open_ and passes > 1:
            return passes
        time.sleep(0.06)
    raise AssertionError("deliveries still open after the timeout")
