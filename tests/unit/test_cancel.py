"""Cancelling a run: it stops at a phase boundary for good, and what waited for a person is withdrawn."""

from __future__ import annotations

import pytest

from keelgate.errors import AlreadyDecidedError, RunFinishedError
from keelgate.gateway import RequireApproval
from keelgate.loop import ActionStatus, StopReason
from tests.conftest import act, answer, buy, quote


async def test_cancelling_a_waiting_run_withdraws_its_approval_and_nothing_ever_runs(world):
    """The order waiting for approval is withdrawn; resume and approve both run nothing."""
    w = world([act(buy()), answer("done")], policy=RequireApproval(["place_order"]))
    loop = w.loop()
    await w.start(loop)
    state = loop.cancel("t1", "run-1", by="carol", note="wrong account")
    order = state.action("1-1")
    assert state.stop_reason is StopReason.CANCELLED
    assert order.status is ActionStatus.DENIED and order.outcome.code == "run_cancelled"
    assert order.approval.withdrawn and not order.approval.granted
    with pytest.raises(AlreadyDecidedError) as caught:
        loop.approve("t1", "run-1", "1-1", by="alice")
    assert caught.value.detail == "carol"
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.CANCELLED and not result.resumable
    assert w.ledger.count() == 0 and w.planner.calls == 0
    event = next(e for e in w.audit.events("t1") if e.kind == "run.cancelled")
    assert (
        event.actor == "carol"
        and event.body["withdrawn"] == ["1-1"]
        and event.body["note"] == "wrong account"
    )


async def test_cancel_is_idempotent_and_a_finished_run_cannot_be_cancelled(world):
    """A second cancel changes nothing (one event); a run that reached its goal is RunFinishedError."""
    w = world([act(buy()), answer("done")], policy=RequireApproval(["place_order"]))
    loop = w.loop()
    await w.start(loop)
    loop.cancel("t1", "run-1", by="carol")
    loop.cancel("t1", "run-1", by="dave")
    assert [e.actor for e in w.audit.events("t1") if e.kind == "run.cancelled"] == ["carol"]
    done = world([act(quote()), answer("done")])
    done.root = w.root / "done"
    done.root.mkdir()
    finished = done.loop()
    assert (await done.start(finished)).goal_reached
    with pytest.raises(RunFinishedError):
        finished.cancel("t1", "run-1", by="carol")


async def test_a_host_that_cancels_stops_the_loop_at_the_next_boundary_for_good(world):
    """should_stop answering CANCELLED: the run stops there, not resumable, and resume runs nothing."""
    w = world([act(quote()), act(buy()), answer("done")])
    asked = []

    def cancelled():
        asked.append(1)
        return StopReason.CANCELLED if len(asked) > 3 else False

    result = await w.start(w.loop(should_stop=cancelled))
    assert result.stop_reason is StopReason.CANCELLED and not result.resumable
    assert w.ledger.count() == 0  # the order of step 2 was never reached
    again = await w.start(w.loop())
    assert again.stop_reason is StopReason.CANCELLED and w.ledger.count() == 0
