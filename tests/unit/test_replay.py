"""Replay: recordings from checkpoint history, replays in memory, divergences, find_run."""

from __future__ import annotations

import pytest

from keelgate.checkpoint import InMemoryCheckpointStore
from keelgate.errors import CrashFailpoint, NotReplayableError
from keelgate.gateway import READ_ONLY, RequireApproval
from keelgate.loop import (
    ActionStatus,
    CallableVerifier,
    Divergence,
    Failpoints,
    Loop,
    LoopLimits,
    LoopState,
    LoopType,
    RecordedStep,
    Recording,
    ReplayReport,
    StopReason,
    Verdict,
    VerdictDecision,
    diff,
    find_run,
    replay,
)
from keelgate.testing import ScriptedPlanner
from tests.conftest import AS_OF, act, answer, buy, quote

SCRIPT = [act(quote(), buy()), answer("bought 10 ACME at 101.5")]


async def recorded(w, trace_id: str = "trace-1", **loop_kwargs) -> Recording:
    """Run the scenario to its end and rebuild it from the SQLite history by trace id."""
    await w.start(w.loop(**loop_kwargs), trace_id=trace_id)
    return Recording.from_store(w.checkpoints, "t1", trace_id=trace_id)


async def test_a_recording_holds_each_step_with_its_actions_outcomes_answer_and_verdict(world):
    """Step 1 has both calls done with their outputs; step 2 has the answer and an accept verdict."""
    w = world(SCRIPT)
    rec = await recorded(w)
    assert rec.run_id == "run-1" and rec.trace_id == "trace-1" and rec.tenant_id == "t1"
    assert rec.stop_reason is StopReason.GOAL_REACHED and rec.final_answer == "bought 10 ACME at 101.5"
    first, second = rec.steps
    assert [a.tool for a in first.actions] == ["get_quote", "place_order"]
    assert [a.status for a in first.actions] == [ActionStatus.DONE, ActionStatus.DONE]
    assert first.actions[0].output == '{"price":101.5,"symbol":"ACME"}'
    assert first.actions[1].arguments == {"symbol": "ACME", "side": "buy", "quantity": 10}
    assert first.final_answer is None and first.verdict is None
    assert second.actions == () and second.final_answer == "bought 10 ACME at 101.5"
    assert second.verdict is not None and second.verdict.decision == VerdictDecision.ACCEPT


async def test_a_recorded_run_replays_identically_without_touching_the_world(world):
    """The replay reaches the same answer with the same calls, and the ledger still holds one order."""
    w = world(SCRIPT)
    rec = await recorded(w)
    report = await replay(rec)
    assert isinstance(report, ReplayReport)
    assert report.identical and report.divergences == []
    assert report.replayed.final_answer == rec.final_answer
    assert [[a.tool for a in s.actions] for s in report.replayed.steps] == [["get_quote", "place_order"], []]
    assert w.ledger.count() == 1


async def test_a_planner_that_proposes_different_arguments_diverges_at_that_step_and_field(world):
    """A model that would buy 20 instead of 10 diverges at step 1, actions[1].arguments, and runs nothing."""
    w = world(SCRIPT)
    rec = await recorded(w)
    changed = ScriptedPlanner([act(quote(), buy(quantity=20)), answer("bought 10 ACME at 101.5")])
    report = await replay(rec, planner=changed)
    assert not report.identical
    first = report.divergences[0]
    assert (first.step, first.where) == (1, "actions[1].arguments")
    assert first.expected["quantity"] == 10 and first.seen["quantity"] == 20
    assert Divergence(1, "actions[1].status", "done", "error") in report.divergences
    assert report.replayed.steps[0].actions[1].outcome.code == "not_replayable"
    assert w.ledger.count() == 1


async def test_a_changed_verifier_diverges_on_the_verdict(world):
    """A verifier that now rejects the recorded answer shows up as a verdict divergence at step 2."""
    w = world(SCRIPT)
    rec = await recorded(w)
    report = await replay(rec, verifier=CallableVerifier(lambda request: Verdict.reject("no")))
    assert Divergence(2, "verdict", "accept", "reject") in report.divergences


async def test_refusals_and_rejected_answers_replay_identically(world):
    """A READ-only refusal and a rejected first answer are served as recorded, so the replay matches."""
    verdicts = iter([Verdict.revise("say more"), Verdict.accept()])
    w = world([act(buy()), answer("no"), answer("could not buy: read-only")])
    rec = await recorded(
        w,
        allowed_side_effects=READ_ONLY,
        verifier=CallableVerifier(lambda request: next(verdicts)),
    )
    assert rec.steps[0].actions[0].outcome.code == "side_effect_not_permitted"
    assert [s.verdict.decision for s in rec.steps[1:] if s.verdict] == ["revise", "accept"]
    assert rec.steps[1].final_answer == "no"
    report = await replay(rec)
    assert report.identical, [str(d) for d in report.divergences]


async def test_a_pending_action_is_not_replayable(world):
    """A run that crashed after planning has actions with no result: replay raises NotReplayableError."""
    w = world(SCRIPT)
    with pytest.raises(CrashFailpoint):
        await w.start(w.loop(failpoints=Failpoints({"after_plan": 1})), trace_id="trace-1")
    rec = Recording.from_store(w.checkpoints, "t1", trace_id="trace-1")
    assert rec.steps[0].actions[0].status is ActionStatus.PENDING
    with pytest.raises(NotReplayableError):
        await replay(rec)


async def test_an_action_awaiting_approval_is_not_replayable(world):
    """An order still waiting for a person has no recorded result: NotReplayableError."""
    w = world(SCRIPT, policy=RequireApproval(["place_order"]))
    rec = await recorded(w)
    assert rec.steps[0].actions[1].status is ActionStatus.AWAITING_APPROVAL
    with pytest.raises(NotReplayableError):
        await replay(rec)


async def test_an_answer_that_was_never_verified_is_not_replayable_without_a_verifier(world):
    """A crash before verifying leaves an answer with no verdict: replayable only with a verifier given."""
    w = world([answer("ACME is 101.5")])
    with pytest.raises(CrashFailpoint):
        await w.start(w.loop(failpoints=Failpoints({"after_plan": 1})), trace_id="trace-1")
    rec = Recording.from_store(w.checkpoints, "t1", run_id="run-1")
    assert rec.steps[0].final_answer == "ACME is 101.5" and rec.steps[0].verdict is None
    with pytest.raises(NotReplayableError):
        await replay(rec)
    report = await replay(rec, verifier=CallableVerifier(lambda request: True))
    assert report.divergences == [Divergence(1, "verdict", None, "accept")]


async def test_a_missing_run_or_a_store_without_history_is_not_replayable(world):
    """An unknown trace or run id, a mismatched pair, or a store that keeps no history: NotReplayableError."""
    w = world(SCRIPT)
    await recorded(w)
    with pytest.raises(NotReplayableError):
        Recording.from_store(w.checkpoints, "t1", trace_id="nope")
    with pytest.raises(NotReplayableError):
        Recording.from_store(w.checkpoints, "t1", run_id="nope")
    with pytest.raises(NotReplayableError):
        Recording.from_store(w.checkpoints, "t1", trace_id="other", run_id="run-1")
    with pytest.raises(ValueError):
        Recording.from_store(w.checkpoints, "t1")

    class LatestOnly:
        """A store that keeps only the latest checkpoint."""

        def load(self, tenant_id: str, run_id: str) -> LoopState | None:
            return w.checkpoints.load(tenant_id, run_id)

        def save(self, state: LoopState) -> None:
            raise AssertionError("read only")

        def runs(self, tenant_id: str) -> list[str]:
            return w.checkpoints.runs(tenant_id)

    with pytest.raises(NotReplayableError):
        Recording.from_store(LatestOnly(), "t1", run_id="run-1")


async def test_from_store_by_trace_id_and_by_run_id_rebuild_the_same_recording(world):
    """Looking a run up by its trace id or its run id gives equal recordings."""
    w = world(SCRIPT)
    by_trace = await recorded(w)
    by_run = Recording.from_store(w.checkpoints, "t1", run_id="run-1")
    both = Recording.from_store(w.checkpoints, "t1", trace_id="trace-1", run_id="run-1")
    assert by_trace == by_run == both


async def test_find_run_never_crosses_tenants_in_sqlite(world):
    """The SQLite store's trace index finds the run in its tenant and nothing in another."""
    w = world(SCRIPT)
    await recorded(w)
    assert find_run(w.checkpoints, "t1", "trace-1") == "run-1"
    assert find_run(w.checkpoints, "t2", "trace-1") is None
    assert find_run(w.checkpoints, "t1", "trace-2") is None


def test_find_run_scans_a_store_without_a_trace_index_within_one_tenant_only():
    """Without find_by_trace the tenant's runs are loaded; another tenant's trace is never returned."""
    store = InMemoryCheckpointStore()
    for tenant, run, trace in (("t1", "a", "x"), ("t2", "b", "y"), ("t1", "c", "z")):
        store.save(
            LoopState(tenant_id=tenant, run_id=run, agent_id="ag", goal="g", as_of=AS_OF, trace_id=trace)
        )
    assert not hasattr(store, "find_by_trace")
    assert find_run(store, "t1", "z") == "c"
    assert find_run(store, "t1", "y") is None
    assert find_run(store, "t2", "y") == "b"
    assert find_run(store, "t2", "x") is None


async def test_a_recording_of_an_in_memory_run_replays_too(world):
    """The in-memory store keeps history, so a run kept there is recorded and replays identically."""
    w = world(SCRIPT)
    template = w.loop()
    store = InMemoryCheckpointStore()
    loop = Loop(planner=w.planner, gateway=template.gateway, checkpoints=store, clock=w.clock)
    await loop.run(goal="buy", tenant_id="t1", agent_id="trader", as_of=AS_OF, trace_id="tr")
    rec = Recording.from_store(store, "t1", trace_id="tr")
    assert len(rec.steps) == 2
    assert (await replay(rec)).identical


def test_diff_reports_a_step_only_one_side_has():
    """A recording with an extra step diverges at that step with where='step'."""

    def recording(*answers: str) -> Recording:
        steps = tuple(RecordedStep(n, final_answer=text) for n, text in enumerate(answers, start=1))
        return Recording(
            tenant_id="t1",
            run_id="r",
            trace_id="x",
            agent_id="a",
            goal="g",
            as_of=AS_OF,
            loop_type=LoopType.TASK,
            allowed_side_effects=READ_ONLY,
            limits=LoopLimits(),
            steps=steps,
        )

    one, two = recording("a"), recording("a", "b")
    assert diff(one, two) == [Divergence(2, "step", None, "final answer")]
    assert diff(two, one) == [Divergence(2, "step", "final answer", None)]
    assert diff(two, two) == []


async def test_each_step_keeps_its_model_usage_and_the_replay_reports_the_same(world):
    """Tokens used by each planning call are recovered from the history and replayed as used."""
    w = world([act(quote(), tokens=(120, 30)), answer("ACME is 101.5")])
    rec = await recorded(w)
    assert [(s.input_tokens, s.output_tokens) for s in rec.steps] == [(120, 30), (0, 0)]
    report = await replay(rec)
    assert report.identical
    assert [(s.input_tokens, s.output_tokens) for s in report.replayed.steps] == [(120, 30), (0, 0)]
