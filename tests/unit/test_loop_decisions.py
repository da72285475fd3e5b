"""Approvals, denials, expiry, four-eyes, reconcile and the outcome confirmer."""

from __future__ import annotations

from datetime import timedelta

import pytest

from keelgate.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalExpiredError,
    CrashFailpoint,
    DuplicateApproverError,
    NoteRequiredError,
    NotReconcilableError,
)
from keelgate.gateway import RequireApproval
from keelgate.loop import ActionStatus, StopReason
from tests.conftest import act, answer, buy, quote


def approvals(**kwargs):
    return RequireApproval(["place_order"], **kwargs)


async def test_a_write_that_needs_approval_waits_and_never_runs_unapproved(world):
    """The run stops approval_pending; resuming without a decision still runs nothing."""
    w = world([act(quote(), buy()), answer("done")], policy=approvals())
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.APPROVAL_PENDING and not result.resumable
    order = result.state.action("1-2")
    assert order.status is ActionStatus.AWAITING_APPROVAL
    assert order.approval is not None and order.approval.required == 1
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    assert w.ledger.count() == 0


async def test_an_approved_write_runs_once_with_the_saved_arguments(world):
    """Approve, resume: the order runs with what was proposed, attributed in the audit chain."""
    w = world([act(buy()), answer("done")], policy=approvals())
    loop = w.loop()
    await w.start(loop)
    loop.approve("t1", "run-1", "1-1", by="alice", note="ok")
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1
    decided = [e for e in w.audit.events("t1") if e.kind == "approval.decided"]
    assert decided[0].actor == "alice" and decided[0].body["decision"] == "approve"


async def test_a_denial_is_recorded_and_the_planner_sees_it(world):
    """Deny marks the action denied with the reason; the next plan's context carries it."""
    w = world([act(buy()), answer("could not buy")], policy=approvals())
    loop = w.loop()
    await w.start(loop)
    loop.deny("t1", "run-1", "1-1", by="bob", note="too large for today")
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 0
    order = result.state.action("1-1")
    assert order.status is ActionStatus.DENIED and order.outcome.code == "approval_denied"
    assert any("too large for today" in m.content for m in w.planner.requests[-1].messages)


async def test_a_denial_needs_a_reason(world):
    """Deny with an empty note raises NoteRequiredError and changes nothing."""
    w = world([act(buy()), answer("x")], policy=approvals())
    loop = w.loop()
    await w.start(loop)
    with pytest.raises(NoteRequiredError):
        loop.deny("t1", "run-1", "1-1", by="bob", note="  ")
    assert w.checkpoints.load("t1", "run-1").action("1-1").status is ActionStatus.AWAITING_APPROVAL


async def test_four_eyes_needs_two_distinct_approvers(world):
    """With approvers=2, one approval is not enough and the same person cannot approve twice."""
    w = world([act(buy()), answer("done")], policy=approvals(approvers=2))
    loop = w.loop()
    await w.start(loop)
    loop.approve("t1", "run-1", "1-1", by="alice")
    with pytest.raises(DuplicateApproverError):
        loop.approve("t1", "run-1", "1-1", by="alice")
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.APPROVAL_PENDING and w.ledger.count() == 0
    loop = w.loop()
    loop.approve("t1", "run-1", "1-1", by="carol")
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1


async def test_a_second_decision_on_a_settled_approval_is_refused_with_who_decided(world):
    """After alice approved, bob's deny raises AlreadyDecidedError naming alice."""
    w = world([act(buy()), answer("done")], policy=approvals())
    loop = w.loop()
    await w.start(loop)
    loop.approve("t1", "run-1", "1-1", by="alice")
    with pytest.raises(AlreadyDecidedError) as caught:
        loop.deny("t1", "run-1", "1-1", by="bob", note="no")
    assert caught.value.detail == "alice"


async def test_an_expired_approval_is_denied_fail_closed(world):
    """Past its expiry the approval cannot be given; the action is denied and audited as expired."""
    w = world([act(buy()), answer("gave up")], policy=approvals(expires_after=timedelta(hours=1)))
    loop = w.loop()
    await w.start(loop)
    w.clock.advance(2 * 3600)
    with pytest.raises(ApprovalExpiredError):
        loop.approve("t1", "run-1", "1-1", by="alice")
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 0
    assert result.state.action("1-1").outcome.code == "approval_expired"
    assert any(e.kind == "approval.expired" for e in w.audit.events("t1"))


async def test_an_approval_expiring_while_nobody_looks_is_denied_on_resume(world):
    """A resume after expiry denies the action through the gateway instead of running it."""
    w = world([act(buy()), answer("gave up")], policy=approvals(expires_after=timedelta(minutes=5)))
    await w.start(w.loop())
    w.clock.advance(600)
    result = await w.start(w.loop())
    assert result.state.action("1-1").status is ActionStatus.DENIED
    assert w.ledger.count() == 0


async def test_approving_an_action_that_needs_no_approval_is_refused(world):
    """Approve on a READ that never waited raises ApprovalError."""
    w = world([act(quote()), answer("done")])
    loop = w.loop()
    await w.start(loop)
    with pytest.raises(ApprovalError):
        loop.approve("t1", "run-1", "1-1", by="alice")


async def _unknown_run(w):
    w.ledger = None
    loop = w.loop()
    w.ledger.crash = ("after", 1, "raise")
    with pytest.raises(CrashFailpoint):
        await w.start(loop)
    loop = w.loop()
    result = await w.start(loop)
    assert result.stop_reason is StopReason.OUTCOME_UNKNOWN and not result.resumable
    w.clock.advance(loop.gateway.lease_seconds + 1)  # the dead worker's key lease runs out
    return loop, result


async def test_an_in_flight_key_after_a_crash_is_an_unknown_outcome_never_retried(world):
    """The tool died mid-call: resume stops outcome_unknown, and resuming again still does not run it."""
    w = world([act(buy()), answer("done")])
    _, result = await _unknown_run(w)
    assert result.state.action("1-1").status is ActionStatus.UNKNOWN
    again = await w.start(w.loop())
    assert again.stop_reason is StopReason.OUTCOME_UNKNOWN
    assert w.ledger.count() == 1


async def test_reconcile_is_refused_while_the_call_may_still_be_running(world):
    """A key in flight under a live lease may belong to a live worker: no guessing, no settling."""
    from keelgate.errors import CallMayBeRunningError

    w = world([act(buy()), answer("done")])
    w.ledger = None
    loop = w.loop()
    w.ledger.crash = ("after", 1, "raise")
    with pytest.raises(CrashFailpoint):
        await w.start(loop)
    loop = w.loop()
    await w.start(loop)
    with pytest.raises(CallMayBeRunningError):
        await loop.reconcile("t1", "run-1", "1-1", executed=False, by="bob")
    w.clock.advance(loop.gateway.lease_seconds + 1)
    await loop.reconcile("t1", "run-1", "1-1", executed=True, by="bob")
    assert (await w.start(w.loop())).goal_reached and w.ledger.count() == 1


async def test_reconcile_executed_records_done_and_the_loop_continues(world):
    """A human says it ran: the action is done, audited as loop.reconciled without arguments."""
    w = world([act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    state = await loop.reconcile("t1", "run-1", "1-1", executed=True, by="bob", note="seen at broker")
    assert state.action("1-1").status is ActionStatus.DONE
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1
    event = next(e for e in w.audit.events("t1") if e.kind == "loop.reconciled")
    assert event.actor == "bob"
    assert event.body["source"] == "human" and event.body["verdict"] == "executed"
    assert "arguments" not in event.body and "ACME" not in str(event.body)


async def test_reconcile_not_executed_abandons_the_key_forever(world):
    """executed=False abandons it; the same key is never run again, a re-plan gets a new key."""
    w = world([act(buy()), act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    await loop.reconcile("t1", "run-1", "1-1", executed=False, by="bob")
    result = await w.start(w.loop())
    first, second = result.state.actions
    assert first.status is ActionStatus.ABANDONED
    assert second.idempotency_key != first.idempotency_key and second.status is ActionStatus.DONE
    assert w.keys.get("t1", first.idempotency_key).status.value == "abandoned"
    assert w.ledger.count() == 2  # the crashed call's row, plus the fresh attempt


async def test_reconcile_refuses_an_action_that_is_not_unknown(world):
    """Reconciling a done action raises NotReconcilableError; reconciling twice names the first person."""
    w = world([act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    await loop.reconcile("t1", "run-1", "1-1", executed=True, by="bob")
    with pytest.raises(AlreadyDecidedError) as caught:
        await loop.reconcile("t1", "run-1", "1-1", executed=False, by="carol")
    assert caught.value.detail == "bob"
    w2 = world([act(quote()), answer("done")])
    w2.root = w.root / "other"
    w2.root.mkdir()
    loop2 = w2.loop()
    await w2.start(loop2)
    with pytest.raises(NotReconcilableError):
        await loop2.reconcile("t1", "run-1", "1-1", executed=True, by="bob")


class LedgerConfirmer:
    """Trusted harness code asking the system of record."""

    name = "ledger"

    def __init__(self, ledger, answer=None):
        self.ledger, self.answer = ledger, answer

    def confirm(self, action, *, tenant_id, run_id):
        if self.answer == "unsure":
            return None
        return self.ledger.count(action.idempotency_key) > 0


async def test_an_outcome_confirmer_settles_an_unknown_outcome_and_is_audited(world):
    """A definite answer from the confirmer settles the action; loop.reconciled names the confirmer."""
    w = world([act(buy()), answer("done")])
    await _unknown_run(w)
    loop = w.loop()
    loop.confirmer = LedgerConfirmer(w.ledger)
    result = await w.start(loop)
    assert result.goal_reached and w.ledger.count() == 1
    event = next(e for e in w.audit.events("t1") if e.kind == "loop.reconciled")
    assert event.actor == "confirmer:ledger" and event.body["source"] == "confirmer"


async def test_an_unsure_confirmer_leaves_it_for_a_human(world):
    """A confirmer answering None (or raising) keeps the run stopped on outcome_unknown."""
    w = world([act(buy()), answer("done")])
    await _unknown_run(w)
    loop = w.loop()
    loop.confirmer = LedgerConfirmer(w.ledger, answer="unsure")
    result = await w.start(loop)
    assert result.stop_reason is StopReason.OUTCOME_UNKNOWN


async def test_a_write_that_raises_is_an_unknown_outcome(world):
    """Any exception from a WRITE (not ToolRejected) may have happened: stop, do not guess."""
    from keelgate.gateway import Gateway, Grants, SideEffect, Tool
    from keelgate.loop import Loop
    from keelgate.testing import TradeOrder

    w = world([act(buy()), answer("done")])
    base = w.loop()

    def flaky(args, call):
        raise ConnectionResetError("peer went away")

    gateway = Gateway(
        [Tool("place_order", SideEffect.WRITE, TradeOrder, flaky)],
        grants=Grants({"trader": ["*"]}),
        idempotency=w.keys,
        audit=w.audit,
        clock=w.clock,
    )
    loop = Loop(planner=w.planner, gateway=gateway, checkpoints=base.checkpoints, clock=w.clock)
    result = await w.start(loop)
    assert result.stop_reason is StopReason.OUTCOME_UNKNOWN
    outcome = result.state.action("1-1").outcome
    assert outcome.code == "outcome_unknown" and outcome.detail == "ConnectionResetError"


async def test_planning_new_calls_asks_the_key_store_nothing(world, monkeypatch):
    """A call no action of the run carries has a new key: no read of the key store per planned call."""
    w = world([act(quote(), buy()), answer("done")])
    loop = w.loop()
    reads: list[str] = []
    get = type(w.keys).get
    monkeypatch.setattr(
        type(w.keys), "get", lambda self, tenant, key: reads.append(key) or get(self, tenant, key)
    )
    result = await w.start(loop)
    assert result.goal_reached and len(result.state.actions) == 2
    assert reads == []


async def test_re_planning_a_planned_call_asks_the_key_store(world, monkeypatch):
    """The same call planned again in the run reads its key: completed replays, abandoned moves on."""
    w = world([act(buy()), act(buy()), answer("done")])
    loop = w.loop()
    reads: list[str] = []
    get = type(w.keys).get
    monkeypatch.setattr(
        type(w.keys), "get", lambda self, tenant, key: reads.append(key) or get(self, tenant, key)
    )
    result = await w.start(loop)
    first, second = result.state.actions
    assert reads == [first.idempotency_key]
    assert second.idempotency_key == first.idempotency_key and second.outcome.replayed
    assert w.ledger.count() == 1


def test_the_decisions_are_a_collaborator_the_loop_holds_not_a_base_with_stubs():
    """Loop derives from nothing; each decision is its own method; _decisions.py stubs nothing of it."""
    import inspect
    from pathlib import Path

    from keelgate.loop import Loop

    assert Loop.__bases__ == (object,)
    for name in ("approve", "deny", "cancel", "reconcile", "reconcile_now", "expire", "warn_expiring"):
        assert name in Loop.__dict__, name
        assert "self._decisions." in inspect.getsource(Loop.__dict__[name]), name
    source = (Path(inspect.getfile(Loop)).parent / "_decisions.py").read_text(encoding="utf-8")
    assert "NotImplementedError" not in source
