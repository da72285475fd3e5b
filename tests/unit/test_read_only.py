"""ADR-0004: verification loops are READ-only, enforced; monitors are READ-only unless opted in."""

from __future__ import annotations

import pytest

from keelgate.errors import ConfigurationError, CrashFailpoint
from keelgate.gateway import ALL_SIDE_EFFECTS, READ_ONLY, SideEffect
from keelgate.loop import ActionStatus, Failpoints, LoopType
from tests.conftest import act, answer, buy
from tests.unit.test_monitor import Harness


def test_a_verification_loop_that_may_write_cannot_be_built(world):
    """Loop(loop_type=VERIFICATION) with more than READ is a ConfigurationError, as VerificationLoop is."""
    w = world([answer("x")])
    with pytest.raises(ConfigurationError):
        w.loop(loop_type=LoopType.VERIFICATION, allowed_side_effects=ALL_SIDE_EFFECTS)
    with pytest.raises(ConfigurationError):
        w.loop(loop_type=LoopType.VERIFICATION, allowed_side_effects={SideEffect.READ, SideEffect.PROPOSE})
    assert w.loop(loop_type=LoopType.VERIFICATION).allowed_side_effects == READ_ONLY


async def test_a_stored_verification_run_resumed_by_a_task_loop_still_cannot_write(world):
    """A verification checkpoint that lists WRITE (an older or edited one) resumes READ-only anyway."""
    w = world([act(buy()), answer("done")])
    with pytest.raises(CrashFailpoint):
        await w.start(w.loop(failpoints=Failpoints({"after_plan": 1})))
    planned = w.checkpoints.load("t1", "run-1")
    assert planned.action("1-1").status is ActionStatus.PENDING
    w.checkpoints.save(
        planned.model_copy(
            update={
                "seq": planned.seq + 1,
                "loop_type": LoopType.VERIFICATION,
                "allowed_side_effects": sorted(ALL_SIDE_EFFECTS),
            }
        )
    )
    result = await w.start(w.loop())  # a TASK loop, allowed everything itself
    order = result.state.action("1-1")
    assert order.status is ActionStatus.ERROR and order.outcome.code == "side_effect_not_permitted"
    assert w.ledger.count() == 0


async def test_a_monitor_is_read_only_by_default_and_its_opt_in_is_audited(tmp_path):
    """Without an opt-in run.started lists none; with one, the chain records what was allowed."""
    h = Harness(tmp_path, [act(buy()), answer("bought")])
    audits = []

    def factory(**kwargs):
        loop = Harness.factory(h, **kwargs)
        audits.append(loop.audit)
        return loop

    h.factory = factory  # type: ignore[method-assign]
    await h.monitor("quiet").tick()
    started = next(e for e in audits[-1].events("t1") if e.kind == "run.started")
    assert "side_effects_opt_in" not in started.body
    assert h.ledger.count() == 0

    h.planner = type(h.planner)([act(buy()), answer("bought")], input_estimate=1)
    result = await h.monitor("trader", allowed_side_effects=ALL_SIDE_EFFECTS).tick()
    started = next(e for e in audits[-1].events("t1") if e.kind == "run.started")
    assert started.body["side_effects_opt_in"] == ["propose", "write"]
    assert result.state.action("1-1").status is ActionStatus.DONE and h.ledger.count() == 1
    h.ledger.close()
