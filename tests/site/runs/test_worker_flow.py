"""A paper-trader run through the services and the worker, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from approvals.services import approval_decide, unknown_reconcile
from audit.selectors import audit_verify
from keelgate.errors import AlreadyDecidedError, NoteRequiredError, RunExistsError
from runs.agents.brokerage import PaperBrokerage
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_resume, run_start
from sitekit.errors import ForbiddenError, GoalNotUnderstoodError, NotFoundError, UnknownAgentError


def drain(worker: Worker) -> None:
    """Run the worker until nothing is runnable."""
    while worker.run_once():
        pass


def start(op, goal="buy 10 ACME", run_id="r1", **kwargs):
    return run_start(tenant_id="t1", agent="paper-trader", goal=goal, user=op, run_id=run_id, **kwargs)[0]


def test_a_run_waits_for_approval_then_places_exactly_one_order(operator, brokerage_path):
    """Queued, claimed, stopped for approval, approved, resumed, done: one execution, chain intact."""
    start(operator)
    worker = Worker(lease_seconds=30)
    drain(worker)
    run = Run.objects.get(run_id="r1")
    assert run.status == RunStatus.WAITING and run.stop_reason == "approval_pending"
    approval = Approval.objects.get(run_id="r1")
    assert approval.status == ApprovalStatus.PENDING and approval.tool == "place_order"
    assert '"quantity":10' in approval.arguments
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="ok")
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED
    drain(worker)
    run = Run.objects.get(run_id="r1")
    assert run.status == RunStatus.DONE and run.stop_reason == "goal_reached"
    ledger = PaperBrokerage().ledger()
    assert [(e.executions, e.replays) for e in ledger] == [(1, 0)]
    assert audit_verify(tenant_id="t1").ok
    assert run.lease_owner == "" and run.lease_expires_at is None


def test_a_denied_order_is_never_placed_and_the_run_finishes(operator, brokerage_path):
    """Deny needs a note; after it the run ends without an order."""
    start(operator)
    worker = Worker()
    drain(worker)
    approval = Approval.objects.get(run_id="r1")
    with pytest.raises(NoteRequiredError):
        approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="deny", note="")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="deny", note="not today")
    drain(worker)
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert PaperBrokerage().ledger() == []
    assert Approval.objects.get(pk=approval.pk).decided_by == "op"


def test_a_second_decision_is_refused_naming_who_decided(operator, brokerage_path):
    """Deciding an already-settled approval raises AlreadyDecidedError with the first decider."""
    start(operator)
    drain(Worker())
    approval = Approval.objects.get(run_id="r1")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
    with pytest.raises(AlreadyDecidedError) as caught:
        approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="deny", note="x")
    assert caught.value.detail == "op"


def test_an_unknown_outcome_is_reconciled_from_the_brokerage_and_the_run_finishes(operator, brokerage_path):
    """The brokerage fails after accepting: unknown outcome in the inbox, reconciled, one order."""
    start(operator)
    worker = Worker()
    drain(worker)
    approval = Approval.objects.get(run_id="r1")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
    PaperBrokerage().set_mode("fail")
    drain(worker)
    PaperBrokerage().set_mode("normal")
    item = UnknownOutcome.objects.get(run_id="r1")
    assert not item.settled and Run.objects.get(run_id="r1").status == RunStatus.WAITING
    executed = PaperBrokerage().entry(item.idempotency_key) is not None
    with pytest.raises(NoteRequiredError):
        unknown_reconcile(tenant_id="t1", item_id=item.pk, user=operator, executed=executed, note=" ")
    unknown_reconcile(
        tenant_id="t1", item_id=item.pk, user=operator, executed=executed, note="seen at broker"
    )
    drain(worker)
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    item.refresh_from_db()
    assert item.settled and item.settled_by == "op" and item.executed is True
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]


def test_a_run_for_an_unknown_agent_or_an_unreadable_goal_is_refused(operator, brokerage_path):
    """Nothing is created for an unknown agent or a goal the planner cannot read."""
    with pytest.raises(UnknownAgentError):
        run_start(tenant_id="t1", agent="nope", goal="buy 1 ACME", user=operator)
    with pytest.raises(GoalNotUnderstoodError):
        start(operator, goal="make me rich")
    assert not Run.objects.exists()


def test_starting_the_same_run_id_twice_is_idempotent_and_a_different_request_refused(
    operator, brokerage_path
):
    """Same id and request returns the existing run; same id, other goal is RunExistsError."""
    first = start(operator)
    again, created = run_start(
        tenant_id="t1", agent="paper-trader", goal="buy 10 ACME", user=operator, run_id="r1"
    )
    assert again.pk == first.pk and created is False
    with pytest.raises(RunExistsError):
        start(operator, goal="sell 1 ACME")


def test_roles_and_tenants_are_enforced_by_the_services(operator, brokerage_path):
    """A viewer cannot start runs; a user of no tenant finds it absent."""
    User = get_user_model()
    with pytest.raises(ForbiddenError):
        start(User.objects.get(username="viewer"))
    stranger = User.objects.create_user("stranger", password="x-123456789")
    with pytest.raises(NotFoundError):
        start(stranger)


def test_a_deleted_agent_stops_the_run_with_a_clear_error_and_loses_nothing(
    operator, brokerage_path, settings
):
    """If the agent disappears the worker stops the run (unknown_agent); restored, it resumes."""
    start(operator)
    agents = dict(settings.KEELGATE_AGENTS)
    settings.KEELGATE_AGENTS = {}
    drain(Worker())
    run = Run.objects.get(run_id="r1")
    assert run.status == RunStatus.STOPPED and run.error_code == "unknown_agent"
    settings.KEELGATE_AGENTS = agents
    run_resume(tenant_id="t1", run_id="r1", user=operator)
    drain(Worker())
    assert Run.objects.get(run_id="r1").status == RunStatus.WAITING


def test_a_budget_stop_resumes_with_a_larger_budget(operator, brokerage_path):
    """max_iterations=1 stops after planning; a resume with 5 finishes after approval."""
    start(operator, limits={"max_iterations": 1})
    worker = Worker()
    drain(worker)
    approval = Approval.objects.get(run_id="r1")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
    drain(worker)
    run = Run.objects.get(run_id="r1")
    assert run.status == RunStatus.STOPPED and run.stop_reason == "max_iterations"
    run_resume(tenant_id="t1", run_id="r1", user=operator, limits={"max_iterations": 5})
    drain(worker)
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert len(PaperBrokerage().ledger()) == 1
