"""Starting, finishing and resuming runs; write-ahead of planned actions."""

from __future__ import annotations

import pytest

from keelgate.errors import CrashFailpoint, RunExistsError, RunNotFoundError
from keelgate.loop import ActionStatus, Failpoints, Phase, Plan, ProposedAction, StopReason
from tests.conftest import AS_OF, act, answer, buy, quote


async def test_a_run_plans_acts_verifies_and_reaches_its_goal(world):
    """The happy path: quote, order, answer; each WRITE runs once and the chain verifies."""
    w = world([act(quote(), buy()), answer("bought 10 ACME at 101.5")])
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.GOAL_REACHED
    assert result.goal_reached and not result.resumable
    assert result.final_answer == "bought 10 ACME at 101.5"
    assert [a.status for a in result.state.actions] == [ActionStatus.DONE, ActionStatus.DONE]
    assert w.ledger.count() == 1
    from keelgate.audit import verify

    assert verify(w.audit, "t1").ok


async def test_planned_actions_are_saved_before_any_of_them_runs(world):
    """A crash right after planning leaves the actions in the checkpoint, pending, and nothing ran."""
    w = world([act(quote(), buy()), answer("done")])
    with pytest.raises(CrashFailpoint):
        await w.start(w.loop(failpoints=Failpoints({"after_plan": 1})))
    saved = w.checkpoints.load("t1", "run-1")
    assert saved is not None and saved.phase is Phase.ACT
    assert [a.status for a in saved.actions] == [ActionStatus.PENDING, ActionStatus.PENDING]
    assert saved.actions[1].idempotency_key.startswith("kg_")
    assert w.ledger.count() == 0


async def test_a_model_that_would_say_something_different_cannot_change_a_saved_action(world):
    """After a crash, the resumed run executes the saved arguments, never a new plan."""
    w = world([act(buy("ACME", 10)), answer("done")])
    with pytest.raises(CrashFailpoint):
        await w.start(w.loop(failpoints=Failpoints({"after_plan": 1})))
    # The "model" now changes its mind completely.
    w.script = [act(buy("EVIL", 9999)), answer("done")]
    loop = w.loop()
    result = await w.start(loop)
    assert result.goal_reached
    order = result.state.actions[0]
    assert order.arguments == {"symbol": "ACME", "side": "buy", "quantity": 10}
    assert [a.tool for a in result.state.actions] == ["place_order"]
    assert w.ledger.count() == 1
    assert w.planner is not None and w.planner.calls == 1  # only the final answer step was planned


async def test_run_refuses_an_id_that_already_has_a_checkpoint(world):
    """``run`` with an existing id raises RunExistsError and changes nothing."""
    w = world([answer("done")])
    loop = w.loop()
    await w.start(loop)
    before = w.checkpoints.load("t1", "run-1")
    events = len(list(w.audit.events("t1")))
    with pytest.raises(RunExistsError):
        await loop.run(goal="again", tenant_id="t1", agent_id="trader", as_of=AS_OF, run_id="run-1")
    assert w.checkpoints.load("t1", "run-1") == before
    assert len(list(w.audit.events("t1"))) == events  # no second run.started


async def test_resume_of_a_missing_run_raises_run_not_found(world):
    """``resume`` of an id with no checkpoint raises RunNotFoundError."""
    w = world([answer("done")])
    with pytest.raises(RunNotFoundError):
        await w.loop().resume("t1", "nope")


async def test_a_run_of_another_tenant_is_absent(world):
    """Resuming or reconciling tenant t1's run as tenant t2 finds nothing."""
    w = world([answer("done")])
    loop = w.loop()
    await w.start(loop)
    with pytest.raises(RunNotFoundError):
        await loop.resume("t2", "run-1")
    with pytest.raises(RunNotFoundError):
        await loop.reconcile("t2", "run-1", "1-1", executed=True, by="x")
    assert w.checkpoints.runs("t2") == []


async def test_resuming_a_finished_run_does_nothing(world):
    """A run that reached its goal is not planned again by run_or_resume."""
    w = world([act(buy()), answer("done")])
    loop = w.loop()
    await w.start(loop)
    calls = w.planner.calls
    seq = w.checkpoints.load("t1", "run-1").seq
    result = await w.start(loop)
    assert result.goal_reached
    assert w.planner.calls == calls
    assert w.checkpoints.load("t1", "run-1").seq == seq
    assert w.ledger.count() == 1


async def test_every_phase_boundary_saves_a_newer_checkpoint(world):
    """History has strictly increasing seqs and passes through plan, act, observe, verify, done."""
    w = world([act(quote()), answer("done")])
    await w.start(w.loop())
    history = w.checkpoints.history("t1", "run-1")
    seqs = [s.seq for s in history]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1
    phases = {s.phase for s in history}
    assert {Phase.PLAN, Phase.ACT, Phase.OBSERVE, Phase.VERIFY, Phase.DONE} <= phases


async def test_the_same_write_twice_in_one_run_is_replayed_not_repeated(world):
    """A planner proposing an identical WRITE again in the same run gets the stored result."""
    w = world([act(buy()), act(buy()), answer("done")])
    result = await w.start(w.loop())
    first, second = result.state.actions
    assert first.idempotency_key == second.idempotency_key
    assert second.outcome.replayed and second.outcome.output == first.outcome.output
    assert w.ledger.count() == 1


async def test_two_runs_may_place_the_same_order_on_purpose(world):
    """The key includes the run, so run-1 and run-2 each execute their order once."""
    w = world([act(buy()), answer("done")])
    loop = w.loop()
    await w.start(loop, run_id="run-1")
    await w.start(loop, run_id="run-2")
    assert sorted(w.ledger.by_key().values()) == [1, 1]


async def test_the_planner_sees_untrusted_tool_output_marked_as_such(world):
    """Tool results reach the next plan as untrusted messages, never as instructions."""
    w = world([act(quote()), answer("done")])
    await w.start(w.loop())
    request = w.planner.requests[1]
    tool_messages = [m for m in request.messages if m.role == "tool"]
    assert tool_messages and all(m.untrusted for m in tool_messages)
    assert "101.5" in tool_messages[0].content
    assert any("never follow" in m.content for m in request.messages if m.role == "system")


async def test_a_planner_returning_garbage_stops_with_an_error_and_keeps_the_state(world):
    """A planner returning a non-Plan stops with ERROR planner_invalid; resume can try again."""
    w = world([lambda request: "not a plan"])
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.ERROR and result.resumable
    assert result.state.error is not None and result.state.error.code == "planner_invalid"
    assert result.state.iteration == 0 and result.state.actions == []
    w.script = [answer("ok now")]
    assert (await w.start(w.loop())).goal_reached


async def test_a_planner_that_raises_stops_with_an_error(world):
    """An exception inside the planner is an ERROR outcome naming only its type."""

    def boom(request):
        raise RuntimeError("secret internals")

    w = world([boom])
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.ERROR
    assert result.state.error.code == "planner_invalid"
    assert result.state.error.detail == "RuntimeError"


def test_a_plan_with_both_actions_and_an_answer_is_refused():
    """Plan refuses actions and a final answer together, and neither."""
    from keelgate.errors import PlannerError

    with pytest.raises(PlannerError):
        Plan(actions=[ProposedAction("get_quote", {"symbol": "A"})], final_answer="x")
    with pytest.raises(PlannerError):
        Plan()


async def test_should_stop_interrupts_at_the_next_phase_boundary_and_resume_continues(world):
    """A host's stop request (SIGTERM) ends the run resumable after a checkpoint, losing nothing."""
    asked = []
    w = world([act(quote(), buy()), answer("done")])

    def stop_after_plan() -> bool:
        asked.append(1)
        return len(asked) > 1

    result = await w.start(w.loop(should_stop=stop_after_plan))
    assert result.stop_reason is StopReason.INTERRUPTED and result.resumable
    assert result.state.phase is Phase.ACT and w.ledger.count() == 0
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1
