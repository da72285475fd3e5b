"""Monitor loops: tick naming and numbering, finishing a half-done tick, READ-only, the schedule."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from keelgate.audit import InMemoryAuditLog
from keelgate.checkpoint import InMemoryCheckpointStore, SqliteCheckpointStore
from keelgate.errors import ConfigurationError, CrashFailpoint
from keelgate.gateway import ALL_SIDE_EFFECTS, Gateway, Grants, RequireApproval
from keelgate.idempotency import InMemoryIdempotencyStore
from keelgate.loop import (
    ActionStatus,
    Failpoints,
    Loop,
    LoopType,
    MonitorLoop,
    MonitorSummary,
    Phase,
    Plan,
    Schedule,
    StopConditions,
    StopReason,
)
from keelgate.testing import FrozenClock, Ledger, ScriptedPlanner, trading_tools
from tests.conftest import AS_OF, act, answer, buy, quote

WATCH = [act(quote()), answer("ACME trades at 101.5")]


class Harness:
    """One monitor's world: a ledger and a checkpoint store, with loops built on demand."""

    def __init__(self, tmp_path: Path, script: Sequence[Plan], **gateway: Any) -> None:
        self.ledger = Ledger(tmp_path / "ledger.sqlite3")
        self.store: Any = InMemoryCheckpointStore()
        self.script = script
        self.gateway_kwargs = gateway
        self.planner = ScriptedPlanner(script, input_estimate=1)
        self.loop_kwargs: dict[str, Any] = {}
        self.clock = FrozenClock()

    def factory(self, **kwargs: Any) -> Loop:
        """The loop_factory: a Loop over the harness's store, passing the monitor's kwargs through."""
        gateway = Gateway(
            trading_tools(self.ledger),
            grants=Grants({"watcher": ["*"]}),
            idempotency=InMemoryIdempotencyStore(),
            audit=InMemoryAuditLog(),
            clock=self.clock,
            **self.gateway_kwargs,
        )
        return Loop(
            planner=self.planner,
            gateway=gateway,
            checkpoints=self.store,
            clock=self.clock,
            **self.loop_kwargs,
            **kwargs,
        )

    def monitor(self, monitor_id: str = "acme", **kwargs: Any) -> MonitorLoop:
        """A MonitorLoop over the harness; kwargs override the defaults."""
        kwargs.setdefault("schedule", Schedule(60))
        return MonitorLoop(
            monitor_id,
            loop_factory=self.factory,
            tenant_id="t1",
            agent_id="watcher",
            goal="watch ACME",
            store=self.store,
            clock=self.clock,
            as_of=AS_OF,
            **kwargs,
        )


@pytest.fixture
def harness(tmp_path):
    made: list[Harness] = []

    def make(script: Sequence[Plan] = WATCH, **gateway: Any) -> Harness:
        h = Harness(tmp_path, script, **gateway)
        made.append(h)
        return h

    yield make
    for h in made:
        h.ledger.close()
        if isinstance(h.store, SqliteCheckpointStore):
            h.store.close()


async def no_sleep(seconds: float) -> None:
    """Never waits."""


async def test_each_tick_is_its_own_monitor_run_named_after_the_monitor(harness):
    """Two ticks are the runs acme.tick-1 and acme.tick-2, each a MONITOR run that reached its goal."""
    h = harness()
    summary = await h.monitor(sleep=no_sleep).run_ticks(2)
    assert isinstance(summary, MonitorSummary) and summary.ticks == 2
    assert [r.run_id for r in summary.results] == ["acme.tick-1", "acme.tick-2"]
    assert all(r.goal_reached for r in summary.results)
    assert all(r.state.loop_type is LoopType.MONITOR for r in summary.results)
    assert h.store.runs("t1") == ["acme.tick-1", "acme.tick-2"]


async def test_the_next_tick_number_comes_from_the_store(harness):
    """A new MonitorLoop over the same store carries on at tick 3, ignoring other monitors and tenants."""
    h = harness()
    await h.monitor(sleep=no_sleep).run_ticks(2)
    await h.monitor("acme2", sleep=no_sleep).run_ticks(1)
    await h.monitor("other").tick()
    elsewhere = {"tenant_id": "t2", "run_id": "acme.tick-9"}
    h.store.save(h.store.load("t1", "acme.tick-2").model_copy(update=elsewhere))
    result = await h.monitor().tick()
    assert result.run_id == "acme.tick-3"
    assert h.monitor().stored_ticks() == [1, 2, 3]


async def test_a_half_done_tick_is_finished_after_a_restart_not_started_over(harness, tmp_path):
    """A tick crashed after planning is resumed by a new monitor over the same SQLite file, not re-planned."""
    h = harness()
    h.store = SqliteCheckpointStore(tmp_path / "checkpoints.sqlite3")
    h.loop_kwargs = {"failpoints": Failpoints({"after_plan": 1})}
    with pytest.raises(CrashFailpoint):
        await h.monitor().tick()
    h.store.close()

    # A fresh process: new store object, new planner, new monitor.
    h.store = SqliteCheckpointStore(tmp_path / "checkpoints.sqlite3")
    h.planner = ScriptedPlanner(WATCH, input_estimate=1)
    h.loop_kwargs = {}
    result = await h.monitor().tick()
    assert result.run_id == "acme.tick-1" and result.goal_reached
    assert result.state.action("1-1").status is ActionStatus.DONE
    assert h.planner.calls == 1  # only the answer step: the saved plan was not asked for again
    assert (await h.monitor().tick()).run_id == "acme.tick-2"


async def test_a_monitor_is_read_only_by_default_and_a_write_is_refused(harness):
    """A WRITE proposed in a tick is refused side_effect_not_permitted and the ledger never sees it."""
    h = harness([act(buy()), answer("could not buy")])
    result = await h.monitor().tick()
    order = result.state.action("1-1")
    assert order.status is ActionStatus.ERROR and order.outcome.code == "side_effect_not_permitted"
    assert h.ledger.count() == 0
    assert [t.name for t in h.planner.requests[0].tools] == ["get_quote"]


async def test_run_ticks_sleeps_the_interval_between_ticks_only(harness):
    """Three ticks sleep twice, for the schedule's interval in seconds."""
    h = harness()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    summary = await h.monitor(schedule=Schedule(timedelta(minutes=5)), sleep=sleep).run_ticks(3)
    assert summary.ticks == 3 and slept == [300.0, 300.0]
    assert (await h.monitor(sleep=sleep).run_ticks(0)).results == []
    assert slept == [300.0, 300.0]


async def test_a_tick_that_hit_its_budget_is_finished_and_the_next_tick_starts_fresh(harness):
    """A tick stopped by max_iterations is not resumed: the next tick is a new run."""
    h = harness()
    monitor = h.monitor(stop=StopConditions(max_iterations=1))
    first = await monitor.tick()
    assert first.stop_reason is StopReason.MAX_ITERATIONS
    second = await monitor.tick()
    assert second.run_id == "acme.tick-2"


async def test_a_tick_waiting_for_a_person_holds_the_monitor_on_that_tick(harness):
    """With WRITE allowed and an approval pending, the next tick() resumes the same tick, not a new one."""
    h = harness([act(buy()), answer("bought")], policy=RequireApproval(["place_order"]))
    monitor = h.monitor(allowed_side_effects=ALL_SIDE_EFFECTS)
    assert (await monitor.tick()).stop_reason is StopReason.APPROVAL_PENDING
    again = await monitor.tick()
    assert again.run_id == "acme.tick-1" and again.stop_reason is StopReason.APPROVAL_PENDING
    assert h.ledger.count() == 0 and h.monitor().stored_ticks() == [1]


async def test_a_loop_factory_that_drops_the_monitor_settings_is_refused(harness):
    """A factory that ignores allowed_side_effects or loop_type raises ConfigurationError before any run."""
    h = harness()

    def widening(**kwargs: Any) -> Loop:
        return h.factory(loop_type=LoopType.MONITOR, allowed_side_effects=ALL_SIDE_EFFECTS)

    def as_task(**kwargs: Any) -> Loop:
        return h.factory(loop_type=LoopType.TASK, allowed_side_effects=kwargs["allowed_side_effects"])

    for factory in (widening, as_task):
        monitor = MonitorLoop(
            "acme",
            loop_factory=factory,
            tenant_id="t1",
            agent_id="watcher",
            goal="watch",
            store=h.store,
            schedule=Schedule(1),
            as_of=AS_OF,
        )
        with pytest.raises(ConfigurationError):
            await monitor.tick()
    assert h.store.runs("t1") == []


async def test_as_of_defaults_to_the_clock_at_the_start_of_each_tick(harness):
    """Without as_of, each new tick is dated by the monitor's clock."""
    h = harness()
    monitor = h.monitor()
    monitor.as_of = None
    first = await monitor.tick()
    h.clock.advance(60)
    second = await monitor.tick()
    assert first.state.as_of == h.clock.now() - timedelta(seconds=60)
    assert second.state.as_of == h.clock.now()
    assert first.state.phase is Phase.DONE


def test_a_schedule_refuses_a_negative_interval():
    """Schedule(-1) raises ValueError; seconds reads floats and timedeltas alike."""
    with pytest.raises(ValueError):
        Schedule(-1)
    assert Schedule(2.5).seconds == 2.5 and Schedule(timedelta(seconds=3)).seconds == 3.0
