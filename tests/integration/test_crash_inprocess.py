"""Crash at every named window (and inside the WRITE tool), restart in-process, recover.

Each case kills the run once with a raised :class:`~keelgate.errors.CrashFailpoint`,
throws every in-memory object away, and recovers with new objects over the same
SQLite files. The side effects are counted in the ledger, not taken on trust.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from keelgate.errors import CrashFailpoint
from keelgate.idempotency import KeyStatus
from keelgate.loop import (
    WINDOWS,
    ActionStatus,
    CheckpointStore,
    Failpoints,
    Loop,
    LoopState,
    StopReason,
)
from tests.integration._scenario import (
    CLEAN_RUN_TRACE,
    CLEAN_RUN_WINDOWS,
    ORDERS,
    RUN,
    TENANT,
    TESTER,
    TOOLS,
    Crash,
    assert_invariants,
    make_world,
    matrix,
    open_loop,
    recover,
    wait_for_leases,
)

pytestmark = pytest.mark.usefixtures("store_layout")


class RecordingFailpoints(Failpoints):
    """Failpoints that never fire and remember the order the windows were reached in."""

    def __init__(self) -> None:
        super().__init__()
        self.trace: list[str] = []

    def hit(self, window: str) -> None:
        """Record the arrival, then count it as usual."""
        self.trace.append(window)
        super().hit(window)


def _prefix(crash: Crash) -> list[str]:
    """The clean run's windows up to and including the crash's window arrival."""
    seen = 0
    for index, window in enumerate(CLEAN_RUN_TRACE):
        if window == crash.where:
            seen += 1
            if seen == crash.occurrence:
                return list(CLEAN_RUN_TRACE[: index + 1])
    raise AssertionError(f"{crash} is not reached by a clean run")


async def test_one_clean_run_reaches_every_window_at_least_three_times(tmp_path: Path) -> None:
    """Without crashes the scenario passes the windows in the expected order, each 3+ times."""
    world = make_world(tmp_path)
    try:
        failpoints = RecordingFailpoints()
        result = await world.start(open_loop(world, failpoints=failpoints))
        assert result.stop_reason is StopReason.GOAL_REACHED
        assert failpoints.trace == list(CLEAN_RUN_TRACE)
        assert failpoints.counts == dict(CLEAN_RUN_WINDOWS)
        assert set(CLEAN_RUN_WINDOWS) == set(WINDOWS)
        assert min(CLEAN_RUN_WINDOWS.values()) >= 3
        assert assert_invariants(world) == ("done", "done", "done")
    finally:
        world.close()


@pytest.mark.parametrize("crash", matrix(), ids=str)
async def test_the_crash_happens_exactly_at_its_window(tmp_path: Path, crash: Crash) -> None:
    """The run dies at the named window's n-th arrival (or n-th WRITE call), with what ran by then."""
    world = make_world(tmp_path)
    try:
        loop = open_loop(world, crash=crash)
        with pytest.raises(CrashFailpoint) as died:
            await world.start(loop)
        assert died.value.window == crash.raised_window
        assert died.value.occurrence == crash.occurrence
        assert world.ledger is not None and world.checkpoints is not None and world.keys is not None
        saved = world.checkpoints.load(TENANT, RUN)
        assert saved is not None

        if crash.in_tool:
            # The n-th order is the one in the tool: claimed, and its row committed or not.
            order = [a for a in saved.actions if a.tool == "place_order"][crash.occurrence - 1]
            assert order.arguments == ORDERS[crash.occurrence - 1]
            assert order.status is ActionStatus.PENDING
            record = world.keys.get(TENANT, order.idempotency_key)
            assert record is not None and record.status is KeyStatus.IN_FLIGHT
            own = 0 if crash.side == "before" else 1
            assert world.ledger.count(order.idempotency_key) == own
            assert world.ledger.count() == crash.occurrence - 1 + own
            return

        prefix = _prefix(crash)
        expected = dict.fromkeys(WINDOWS, 0) | Counter(prefix)
        assert loop.failpoints.counts == expected
        # The n-th gateway call belongs to the n-th planned action; count the WRITEs done.
        calls = prefix.count("after_gateway_call")
        assert world.ledger.count() == TOOLS[:calls].count("place_order")
        if crash.where == "after_gateway_call":
            # The window that matters: the tool has run, the checkpoint does not know yet.
            assert saved.actions[calls - 1].status is ActionStatus.PENDING
    finally:
        world.close()


@pytest.mark.parametrize("crash", matrix(), ids=str)
async def test_after_a_crash_and_recovery_every_write_took_effect_once_or_was_abandoned(
    tmp_path: Path, crash: Crash
) -> None:
    """One crash, then fresh objects recover: each order ran once, or never and the tester abandoned it."""
    world = make_world(tmp_path)
    try:
        with pytest.raises(CrashFailpoint):
            await world.start(open_loop(world, crash=crash))
        result = await recover(world)
        assert result.goal_reached and result.final_answer == "final"

        statuses = assert_invariants(world)
        expected = ["done", "done", "done"]
        if crash.where == "tool_before":
            expected[crash.occurrence - 1] = "abandoned"
        assert statuses == tuple(expected)

        assert world.audit is not None
        reconciles = [e for e in world.audit.events(TENANT) if e.kind == "loop.reconciled"]
        # Only a death inside the tool leaves an outcome unknown; every window is replayable.
        assert len(reconciles) == (1 if crash.in_tool else 0)
        if crash.where == "after_gateway_call" and TOOLS[crash.occurrence - 1] == "place_order":
            assert result.state.actions[crash.occurrence - 1].outcome.replayed
    finally:
        world.close()


@pytest.mark.parametrize("crash", [c for c in matrix() if c.in_tool], ids=str)
async def test_an_unknown_outcome_is_never_retried_by_resuming_without_a_human(
    tmp_path: Path, crash: Crash
) -> None:
    """After a death inside the tool, every resume stops on outcome_unknown and adds no row until settled."""
    world = make_world(tmp_path)
    try:
        with pytest.raises(CrashFailpoint):
            await world.start(open_loop(world, crash=crash))
        assert world.ledger is not None
        rows = world.ledger.count()
        for _ in range(3):  # the first resume meets the in-flight key, later ones the saved unknown
            result = await world.start(open_loop(world))
            assert result.stop_reason is StopReason.OUTCOME_UNKNOWN
            assert world.ledger.count() == rows
            order = [a for a in result.state.actions if a.tool == "place_order"][crash.occurrence - 1]
            assert order.status is ActionStatus.UNKNOWN
        result = await recover(world)
        assert result.goal_reached
        expected = ["done", "done", "done"]
        if crash.side == "before":
            expected[crash.occurrence - 1] = "abandoned"
        assert assert_invariants(world) == tuple(expected)
    finally:
        world.close()


class DyingCheckpoints:
    """A checkpoint store whose next save dies (raises CrashFailpoint) once armed."""

    def __init__(self, inner: CheckpointStore) -> None:
        self.inner = inner
        self.armed = False

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The inner store's latest state."""
        return self.inner.load(tenant_id, run_id)

    def save(self, state: LoopState) -> None:
        """Die instead of saving when armed; otherwise save."""
        if self.armed:
            raise CrashFailpoint("checkpoint_save", 1)
        self.inner.save(state)

    def runs(self, tenant_id: str) -> list[str]:
        """The inner store's runs."""
        return self.inner.runs(tenant_id)


@pytest.mark.parametrize("crash", [c for c in matrix() if c.in_tool], ids=str)
async def test_a_reconcile_that_dies_before_its_checkpoint_still_settles_the_write(
    tmp_path: Path, crash: Crash
) -> None:
    """A human's verdict reaches the key store, the process dies before the checkpoint: resume obeys it."""
    world = make_world(tmp_path)
    try:
        with pytest.raises(CrashFailpoint):
            await world.start(open_loop(world, crash=crash))
        result = await world.start(open_loop(world))
        assert result.stop_reason is StopReason.OUTCOME_UNKNOWN
        [unknown] = [a for a in result.state.actions if a.status is ActionStatus.UNKNOWN]

        base = open_loop(world)
        store = DyingCheckpoints(base.checkpoints)
        loop = Loop(
            planner=base.planner,
            gateway=base.gateway,
            checkpoints=store,
            verifier=base.verifier,
            stop=base.stop,
            clock=base.clock,
            failpoints=Failpoints(),
        )
        assert world.ledger is not None
        executed = world.ledger.count(unknown.idempotency_key) > 0
        store.armed = True
        wait_for_leases(loop)
        with pytest.raises(CrashFailpoint):
            await loop.reconcile(TENANT, RUN, unknown.action_id, executed=executed, by=TESTER)

        result = await recover(world)
        assert result.goal_reached
        expected = ["done", "done", "done"]
        if crash.side == "before":
            expected[crash.occurrence - 1] = "abandoned"
        assert assert_invariants(world) == tuple(expected)
        assert world.audit is not None
        reconciles = [e for e in world.audit.events(TENANT) if e.kind == "loop.reconciled"]
        assert len(reconciles) == 1, "the verdict was asked for or recorded twice"
    finally:
        world.close()
