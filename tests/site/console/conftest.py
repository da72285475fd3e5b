"""Fixtures of the console tests: people in two tenants, runs waiting for a person."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client

from approvals.models import Approval, UnknownOutcome
from approvals.services import approval_decide
from audit.wiring import audit_log
from keelgate.loop import (
    ActionOutcome,
    ActionStatus,
    ApprovalState,
    LoopState,
    Phase,
    PlannedAction,
    StopReason,
    VerdictRecord,
)
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_start
from tenants.models import Membership, Role, Tenant

PASSWORD = "pw-console-123456"

XSS_SCRIPT = "<script>window.__xss=1;alert('xss-script')</script>"
XSS_IMG = "<img src=x onerror=\"window.__xss=2;alert('xss-img')\">"
XSS_JS_URL = "javascript:alert('xss-url')"


@pytest.fixture(autouse=True)
def _fast_outbox(settings):
    """Poll the head rows often on SQLite: the tests wait for live updates."""
    settings.KEELGATE_OUTBOX_POLL_SECONDS = 0.05


@pytest.fixture(autouse=True)
def _fresh_render_cache():
    """Each test starts its chains at 1 again: a patch cached by the last test must not serve it."""
    from approvals.consumers import RENDERED

    RENDERED.clear()
    yield
    RENDERED.clear()


@pytest.fixture
def people(operator):
    """t1: op (admin), viewer (viewer), bob (approver), rita (reconciler); t2: eve (admin)."""
    User = get_user_model()
    t1 = Tenant.objects.get(slug="t1")
    t2 = Tenant.objects.create(slug="t2", name="T2")
    bob = User.objects.create_user("bob", password=PASSWORD)
    Membership.objects.create(user=bob, tenant=t1, role=Role.APPROVER)
    rita = User.objects.create_user("rita", password=PASSWORD)
    Membership.objects.create(user=rita, tenant=t1, role=Role.RECONCILER)
    eve = User.objects.create_user("eve", password=PASSWORD)
    Membership.objects.create(user=eve, tenant=t2, role=Role.ADMIN)
    return {
        "op": operator,
        "viewer": User.objects.get(username="viewer"),
        "bob": bob,
        "rita": rita,
        "eve": eve,
    }


def login(user) -> Client:
    """A test client logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def as_user(people):
    """``as_user("bob")`` is a client logged in as bob."""
    return lambda name: login(people[name])


def drain(worker: Worker | None = None) -> None:
    """Run an in-process worker until nothing is runnable."""
    worker = worker or Worker()
    while worker.run_once():
        pass


def start_waiting(
    op, run_id: str = "r1", *, agent: str = "paper-trader", goal: str = "buy 10 ACME", **kw
) -> Approval:
    """Start a run and drive it until its order waits for approval; return the approval."""
    run_start(tenant_id="t1", agent=agent, goal=goal, user=op, run_id=run_id, **kw)
    drain()
    return Approval.objects.get(tenant_id="t1", run_id=run_id)


@pytest.fixture
def waiting(people, brokerage_path):
    """Run r1 of t1 waits for approval of its order."""
    return start_waiting(people["op"])


@pytest.fixture
def unknown(people, brokerage_path):
    """Run u1 of t1: approved, the brokerage failed after executing: an unknown outcome."""
    approval = start_waiting(people["op"], "u1")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    return UnknownOutcome.objects.get(tenant_id="t1", run_id="u1")


def write_hostile_run(tenant_id: str = "t1", run_id: str = "evil") -> Run:
    """A run whose checkpoint carries script, onerror and javascript: payloads everywhere.

    A pending approval and an unknown outcome with hostile arguments, hostile tool
    output, a hostile goal, rationale, verdict and answer. Written straight through the
    checkpoint store (so the inbox rows are projected as the worker's would be), with
    the ``run.stopped`` audit event the loop would append (which wakes the outbox).
    """
    now = datetime.now(UTC)
    hostile = {"note": XSS_SCRIPT, "img": XSS_IMG, "url": XSS_JS_URL, "</pre><b>": "x"}
    run = Run.objects.create(
        tenant_id=tenant_id,
        run_id=run_id,
        agent="paper-trader",
        goal=f"buy 1 ACME {XSS_SCRIPT} {XSS_IMG} {XSS_JS_URL}",
        as_of=now,
        status=RunStatus.WAITING,
        created_by="op",
    )
    state = LoopState(
        tenant_id=tenant_id,
        run_id=run_id,
        agent_id="paper-trader",
        goal=run.goal,
        as_of=now,
        trace_id=uuid.uuid4().hex,
        phase=Phase.ACT,
        iteration=1,
        stop_reason=StopReason.APPROVAL_PENDING,
        final_answer=f"done {XSS_IMG}",
        actions=[
            PlannedAction(
                action_id="a-read",
                iteration=1,
                tool="get_quote",
                arguments={"symbol": XSS_SCRIPT},
                idempotency_key=f"{run_id}-k0",
                rationale=XSS_IMG,
                outcome=ActionOutcome(
                    status=ActionStatus.DONE,
                    output=json.dumps({"html": XSS_SCRIPT, "link": XSS_JS_URL}),
                    at=now,
                ),
            ),
            PlannedAction(
                action_id="a-write",
                iteration=1,
                tool="place_order",
                arguments=hostile,
                idempotency_key=f"{run_id}-k1",
                outcome=ActionOutcome(status=ActionStatus.AWAITING_APPROVAL, at=now),
                approval=ApprovalState(required=1, reason=f"reason {XSS_IMG}", requested_at=now),
            ),
            PlannedAction(
                action_id="a-unknown",
                iteration=1,
                tool="place_order",
                arguments={"symbol": XSS_IMG, "side": XSS_JS_URL},
                idempotency_key=f"{run_id}-k2",
                outcome=ActionOutcome(
                    status=ActionStatus.UNKNOWN,
                    code="outcome_unknown",
                    detail="in_flight",
                    output=XSS_SCRIPT,
                    at=now,
                ),
            ),
        ],
        verdicts=[VerdictRecord(iteration=1, decision="reject", reasons=[XSS_SCRIPT], flags=[XSS_IMG])],
        seq=1,
        created_at=now,
        updated_at=now,
    )
    with transaction.atomic():
        DjangoCheckpointStore().save(state)
        # As the loop does after a stop: the event is what tells the console (the outbox).
        audit_log().append(
            tenant_id, actor="agent:paper-trader", kind="run.stopped", body={"run_id": run_id, "seq": 1}
        )
    return run
