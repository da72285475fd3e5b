"""Ten people deciding the same approval at the same instant: exactly one decision counts.

Each thread has its own database connection and calls ``approval_decide`` (the service
layer, as the console and the API do) after a barrier. The service locks the inbox row,
so the first decision wins and every other caller gets AlreadyDecidedError naming the
winner. A StaleCheckpointError leaking out would be a bug: the service is meant to map
a lost race to AlreadyDecidedError, so this test does not accept it.
"""

from __future__ import annotations

import functools
import json

import pytest
from django.contrib.auth import get_user_model

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from audit.selectors import audit_verify
from audit.wiring import audit_log
from keelgate.errors import AlreadyDecidedError
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_start
from tenants.models import Membership, Role, Tenant
from tests.site._threads import at_once

DECIDERS = 10


@pytest.fixture
def deciders(operator):
    """Ten approvers of tenant t1 (no passwords: hashing them would only cost time)."""
    tenant = Tenant.objects.get(slug="t1")
    users = []
    for i in range(DECIDERS):
        user = get_user_model().objects.create_user(f"decider{i}")
        Membership.objects.create(user=user, tenant=tenant, role=Role.APPROVER)
        users.append(user)
    return users


def decide_at_once(approval_id: int, users) -> list[tuple[str, object]]:
    """Every user decides at the same moment (even ones approve, odd ones deny); outcomes by user."""

    def decide(i: int) -> object:
        decision = "approve" if i % 2 == 0 else "deny"
        note = "" if decision == "approve" else f"no from {users[i].username}"
        return approval_decide(
            tenant_id="t1", approval_id=approval_id, user=users[i], decision=decision, note=note
        )

    outcomes = at_once([functools.partial(decide, i) for i in range(len(users))], timeout=120)
    return [(user.username, outcome) for user, outcome in zip(users, outcomes, strict=True)]


def records_a_decision(state, action_id: str) -> bool:
    """Does this checkpoint carry an approval vote or a denial for the action?"""
    action = state.action(action_id)
    approval = action.approval if action else None
    return bool(approval and (approval.approvals or approval.denied_by))


@pytest.mark.parametrize("round_", range(3))
def test_ten_simultaneous_decisions_on_one_approval_take_effect_exactly_once(
    operator, deciders, brokerage_path, round_
):
    """One decision wins; nine get AlreadyDecidedError naming the winner; one vote and one audit event."""
    run_id = f"c{round_}"
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 3 GAMMA", user=operator, run_id=run_id)
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    approval = Approval.objects.get(tenant_id="t1", run_id=run_id)
    assert approval.status == ApprovalStatus.PENDING

    results = decide_at_once(approval.pk, deciders)

    winners = [(name, value) for name, value in results if isinstance(value, Approval)]
    losers = [(name, value) for name, value in results if not isinstance(value, Approval)]
    assert len(winners) == 1, f"expected exactly one winner: {results}"
    winner = winners[0][0]
    wrong = [(name, repr(exc)) for name, exc in losers if not isinstance(exc, AlreadyDecidedError)]
    assert not wrong, f"losers must get AlreadyDecidedError (StaleCheckpointError here is a bug): {wrong}"
    assert {exc.detail for _, exc in losers} == {winner}, f"AlreadyDecidedError must name {winner}: {results}"

    approved = int(winner.removeprefix("decider")) % 2 == 0
    row = Approval.objects.get(pk=approval.pk)
    assert row.decided_by == winner
    assert row.status == (ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED)

    state = DjangoCheckpointStore().load("t1", run_id)
    action = state.action(approval.action_id)
    if approved:
        assert [v.by for v in action.approval.approvals] == [winner] and action.approval.denied_by is None
    else:
        assert action.approval.approvals == [] and action.approval.denied_by == winner
    history = DjangoCheckpointStore().history("t1", run_id)
    decided = [s.seq for s in history if records_a_decision(s, approval.action_id)]
    assert decided == [state.seq], f"more than one checkpoint records a decision: {decided}"

    events = [
        e for e in audit_log().events("t1") if e.kind == "approval.decided" and e.body["run_id"] == run_id
    ]
    assert [e.actor for e in events] == [winner]
    assert audit_verify(tenant_id="t1").ok
    assert Run.objects.get(tenant_id="t1", run_id=run_id).status == RunStatus.QUEUED


class DecisionBeforeRelease(Worker):
    """A worker at whose first WAITING release a person decides first: their click lands
    after the run's last checkpoint, while the run is still ``running``."""

    def __init__(self, decide, **kwargs) -> None:
        super().__init__(**kwargs)
        self.decide = decide
        self.raced = False

    def _release_waiting(self, claim, seq, reason):
        if not self.raced:
            self.raced = True
            self.decide()
        return super()._release_waiting(claim, seq, reason)


def test_an_approval_given_while_the_worker_is_still_releasing_the_run_is_not_lost(operator, brokerage_path):
    """Approved between the stop checkpoint and the release: the run still gets queued and finishes."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 2 ACME", user=operator, run_id="race")

    def approve() -> None:
        approval = Approval.objects.get(tenant_id="t1", run_id="race")
        approval_decide(
            tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="now"
        )

    worker = DecisionBeforeRelease(approve, lease_seconds=30)
    while worker.run_once():
        pass
    assert worker.raced
    assert Approval.objects.get(tenant_id="t1", run_id="race").status == ApprovalStatus.APPROVED
    run = Run.objects.get(tenant_id="t1", run_id="race")
    assert run.status == RunStatus.DONE, f"approved run left {run.status} ({run.stop_reason})"


def test_a_reconcile_given_while_the_worker_is_still_releasing_the_run_is_not_lost(operator, brokerage_path):
    """Unknown outcome reconciled between the stop checkpoint and the release: the run still finishes."""
    from approvals.models import UnknownOutcome
    from approvals.services import unknown_reconcile
    from runs.agents.brokerage import PaperBrokerage

    run_start(tenant_id="t1", agent="paper-trader", goal="buy 2 ACME", user=operator, run_id="race")
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    approval = Approval.objects.get(tenant_id="t1", run_id="race")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="ok")
    PaperBrokerage().set_mode("fail")

    def reconcile() -> None:
        PaperBrokerage().set_mode("normal")
        item = UnknownOutcome.objects.get(tenant_id="t1", run_id="race")
        executed = PaperBrokerage().entry(item.idempotency_key) is not None
        unknown_reconcile(tenant_id="t1", item_id=item.pk, user=operator, executed=executed, note="ledger")

    worker = DecisionBeforeRelease(reconcile, lease_seconds=30)
    while worker.run_once():
        pass
    assert worker.raced
    assert UnknownOutcome.objects.get(tenant_id="t1", run_id="race").settled
    run = Run.objects.get(tenant_id="t1", run_id="race")
    assert run.status == RunStatus.DONE, f"reconciled run left {run.status} ({run.stop_reason})"


def test_edits_racing_each_other_leave_exactly_one_edited_call(deciders, brokerage_path):
    """Ten people edit the same approval to ten quantities at once: one edit wins, one order is placed."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 50 ACME", user=deciders[0], run_id="edit-race")
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    approval = Approval.objects.get(tenant_id="t1", run_id="edit-race")

    def edit(i: int) -> object:
        return approval_decide(
            tenant_id="t1",
            approval_id=approval.pk,
            user=deciders[i],
            decision="approve",
            arguments={"symbol": "ACME", "side": "buy", "quantity": i + 1},
        )

    outcomes = at_once([functools.partial(edit, i) for i in range(len(deciders))])
    winners = [o for o in outcomes if isinstance(o, Approval)]
    losers = [o for o in outcomes if not isinstance(o, Approval)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, AlreadyDecidedError) for o in losers), losers
    edited = [e for e in audit_log().events("t1") if e.kind == "approval.edited"]
    assert len(edited) == 1
    while worker.run_once():
        pass
    quantity = json.loads(winners[0].arguments)["quantity"]
    assert [(e.quantity, e.executions) for e in PaperBrokerage().ledger()] == [(quantity, 1)]
    assert audit_verify(tenant_id="t1").ok
