"""Two resumers of one approved run at once: the approved WRITE still runs once.

Every place_order needs a person's approval, so the run stops in front of each one.
Once the tester approves, two resumers start together from the same checkpoint: both
try the WRITE under the same key, and both try to save the next checkpoint. The key
store lets one of them run the tool; the checkpoint store lets one of them go on (the
other gets StaleCheckpointError, or stops on an outcome it cannot know). Ledger rows
are never deleted, so a count of at most one per key after the race means at most one
at every moment of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from keelgate.errors import CallMayBeRunningError, StaleCheckpointError
from keelgate.gateway import CallContext, Gateway, GatewayResult, RequireApproval, SideEffect, Tool, ToolCall
from keelgate.loop import (
    ActionStatus,
    Failpoints,
    Loop,
    LoopResult,
    PlannedAction,
    StopReason,
)
from keelgate.testing import Ledger, TradeOrder, trading_tools
from tests.conftest import World
from tests.integration._scenario import (
    ORDERS,
    RUN,
    TENANT,
    TESTER,
    TOOL_CRASH_ENV,
    approve_waiting,
    assert_invariants,
    make_world,
    open_loop,
    recover,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("store_layout")]

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_crash_child.py")
STALE_EXIT = 3
ROUNDS = 15
FINISHED = {
    StopReason.APPROVAL_PENDING.value,
    StopReason.OUTCOME_UNKNOWN.value,
    StopReason.GOAL_REACHED.value,
}
"""How a resumer that was not beaten to a save may stop: at the next approval, at an
outcome it cannot know (the other one holds the key), or at the goal."""


def approval_world(root: Path) -> World:
    """The scenario with every place_order waiting for a person."""
    return make_world(root, policy=RequireApproval(["place_order"]))


async def approve_up_to(root: Path, order: int) -> None:
    """Run in-process until the ``order``-th place_order (1-based) is approved, not yet run."""
    world = approval_world(root)
    try:
        for _ in range(order):
            loop = open_loop(world)
            result = await world.start(loop)
            assert result.stop_reason is StopReason.APPROVAL_PENDING, result.stop_reason
            [approved] = await approve_waiting(loop, result.state)
            action = result.state.action(approved)
            assert action is not None and action.arguments == ORDERS[len(_writes(result)) - 1]
    finally:
        world.close()


def _writes(result: LoopResult) -> list[str]:
    return [a.action_id for a in result.state.actions if a.tool == "place_order"]


def ledger_peak(root: Path) -> int:
    """The most rows any one key has in the ledger."""
    ledger = Ledger(root / "ledger.sqlite3")
    try:
        return max(ledger.by_key().values(), default=0)
    finally:
        ledger.close()


async def finish(root: Path) -> tuple[tuple[str, ...], int]:
    """Recover to the goal (approving the rest), check the invariants; count reconciles."""
    world = approval_world(root)
    try:
        result = await recover(world, approve=True)
        assert result.goal_reached
        statuses = assert_invariants(world)
        assert world.audit is not None
        reconciled = sum(1 for e in world.audit.events(TENANT) if e.kind == "loop.reconciled")
        return statuses, reconciled
    finally:
        world.close()


# -- two processes ----------------------------------------------------------------


def _spawn(root: Path, index: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KEELGATE_FAILPOINT", TOOL_CRASH_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    args = ["--approval", "--ready", str(root / f"ready-{index}"), "--go", str(root / "go")]
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(root), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def race_processes(root: Path) -> list[str]:
    """Start two workers on the approved run at the same instant; return how each ended."""
    (root / "go").unlink(missing_ok=True)
    children = [_spawn(root, i) for i in range(2)]
    ended: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not all((root / f"ready-{i}").exists() for i in range(2)):
            assert all(c.poll() is None for c in children), "a worker died before the race"
            assert time.monotonic() < deadline, "the workers did not get ready"
            time.sleep(0.002)
        (root / "go").touch()
        for child in children:
            out, err = child.communicate(timeout=60)
            if child.returncode == STALE_EXIT:
                assert json.loads(out) == {"error": "stale_checkpoint"}
                ended.append("stale_checkpoint")
            else:
                assert child.returncode == 0, err
                stop = json.loads(out)["stop_reason"]
                assert stop in FINISHED, stop
                ended.append(stop)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        for i in range(2):
            (root / f"ready-{i}").unlink(missing_ok=True)
    return ended


def test_two_processes_resuming_an_approved_run_at_once_run_each_write_once(
    tmp_path: Path,
) -> None:
    """15 races of two worker processes on a freshly approved WRITE: never two ledger rows for a key."""
    ended: Counter[str] = Counter()
    for round_ in range(ROUNDS):
        root = tmp_path / f"round-{round_}"
        root.mkdir()
        order = round_ % len(ORDERS) + 1  # race at the 1st, 2nd and 3rd WRITE in turn
        asyncio.run(approve_up_to(root, order))
        outcome = race_processes(root)
        ended.update(outcome)
        assert ledger_peak(root) <= 1, f"round {round_}: a key has two rows ({outcome})"
        statuses, reconciled = asyncio.run(finish(root))
        assert statuses == ("done", "done", "done"), f"round {round_}: {statuses} ({outcome})"
        assert reconciled == 0, f"round {round_}: a human was asked what the key store knew"
        assert ledger_peak(root) == 1
    # Not a vacuous race: at least once both workers started from the same checkpoint
    # and the store turned the second saver away.
    assert ended["stale_checkpoint"] >= 1, dict(ended)


# -- two loops in one event loop --------------------------------------------------


class Signals:
    """Moments of the first resumer's run that the second one can wait for."""

    def __init__(self) -> None:
        self.tool_entered = asyncio.Event()
        self.row_committed = asyncio.Event()
        self.first_returned = asyncio.Event()
        self.release = asyncio.Event()
        """The tool commits its row only once this is set (it starts set)."""
        self.release.set()
        self.rows: list[int] = []
        """The key's ledger count right after each commit."""


class GatedGateway(Gateway):
    """A gateway that waits for ``gate`` before acting, to pin an interleaving."""

    def __init__(self, *args: Any, gate: asyncio.Event | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = gate

    async def execute(self, ctx: CallContext, action: PlannedAction) -> GatewayResult:
        """Wait for the gate (if any), then decide and run as usual."""
        if self.gate is not None:
            await self.gate.wait()
        return await super().execute(ctx, action)


def slow_loop(world: World, signals: Signals, gate: asyncio.Event | None = None) -> Loop:
    """The scenario's loop over the world's files, with a place_order that takes its time.

    The order yields to the event loop before it commits its ledger row (holding
    until ``signals.release`` is set) and again after, before its key is completed;
    ``signals`` says when it entered and when the row is in.
    """
    base = open_loop(world)
    assert world.ledger is not None
    ledger = world.ledger

    async def place_order(args: TradeOrder, call: ToolCall) -> dict[str, Any]:
        signals.tool_entered.set()
        await asyncio.sleep(0.01)
        await signals.release.wait()
        order_id = ledger.execute(call.idempotency_key, "place_order", args.model_dump())
        signals.rows.append(ledger.count(call.idempotency_key))
        signals.row_committed.set()
        await asyncio.sleep(0.01)
        return {"order_id": order_id, "symbol": args.symbol, "filled": args.quantity}

    [get_quote] = [t for t in trading_tools(ledger) if t.name == "get_quote"]
    slow = Tool("place_order", SideEffect.WRITE, TradeOrder, place_order, "A slow market order.")
    gateway = GatedGateway(
        [get_quote, slow],
        grants=base.gateway.grants,
        idempotency=base.gateway.idempotency,
        audit=base.gateway.audit,
        policy=base.gateway.policy,
        clock=base.gateway.clock,
        gate=gate,
    )
    return Loop(
        planner=base.planner,
        gateway=gateway,
        checkpoints=base.checkpoints,
        verifier=base.verifier,
        stop=base.stop,
        clock=base.clock,
        failpoints=Failpoints(),
    )


UNKNOWN = StopReason.OUTCOME_UNKNOWN.value
INTERLEAVINGS = {
    # The second resumer loads the same checkpoint and claims the key while the first
    # is inside the tool: it cannot know the outcome, saves that and stops; the first
    # then finds its checkpoint stale.
    "together": ("stale_checkpoint", UNKNOWN),
    "after-commit": ("stale_checkpoint", UNKNOWN),
    # It loaded the same checkpoint but acts after the first has finished: the key
    # replays the stored result, and its save is stale.
    "after-first-finished": ("finished", "stale_checkpoint"),
    # It starts after the first has finished, from the newer checkpoint.
    "starts-after-first": ("finished", "finished"),
}


@pytest.mark.parametrize("order", [1, 2, 3], ids=lambda n: f"write{n}")
@pytest.mark.parametrize("interleaving", list(INTERLEAVINGS))
async def test_two_loops_resuming_an_approved_run_concurrently_run_each_write_once(
    tmp_path: Path, order: int, interleaving: str
) -> None:
    """Two Loop objects over the same files resume an approved slow WRITE at once: it runs once."""
    await approve_up_to(tmp_path, order)
    signals = Signals()
    gate = {
        "together": None,
        "after-commit": signals.row_committed,
        "after-first-finished": signals.first_returned,
        "starts-after-first": None,
    }[interleaving]
    worlds = [approval_world(tmp_path), approval_world(tmp_path)]
    try:
        first = slow_loop(worlds[0], signals)
        second = slow_loop(worlds[1], signals, gate)

        async def run_first() -> LoopResult:
            try:
                result: LoopResult = await worlds[0].start(first)
                return result
            finally:
                signals.first_returned.set()

        async def run_second() -> LoopResult:
            if interleaving == "starts-after-first":
                await signals.first_returned.wait()
            result: LoopResult = await worlds[1].start(second)
            return result

        ended = await asyncio.gather(run_first(), run_second(), return_exceptions=True)
        seen = []
        for end in ended:
            if isinstance(end, StaleCheckpointError):
                seen.append("stale_checkpoint")
            else:
                assert isinstance(end, LoopResult), repr(end)
                assert end.stop_reason.value in FINISHED, end.stop_reason
                seen.append(UNKNOWN if end.stop_reason.value == UNKNOWN else "finished")
        assert tuple(seen) == INTERLEAVINGS[interleaving]
        assert worlds[0].checkpoints is not None
        latest = worlds[0].checkpoints.load(TENANT, RUN)
        assert latest is not None
        raced = [a for a in latest.actions if a.tool == "place_order"][order - 1]
        assert raced.arguments == ORDERS[order - 1]
        assert raced.status is (ActionStatus.UNKNOWN if UNKNOWN in seen else ActionStatus.DONE)
        assert signals.rows == [1], f"the approved order ran {len(signals.rows)} times"
    finally:
        for w in worlds:
            w.close()
    assert ledger_peak(tmp_path) == 1
    statuses, reconciled = await finish(tmp_path)
    assert statuses == ("done", "done", "done")
    assert reconciled == 0, "the key store knew the outcome, yet a human was asked"


async def test_a_human_cannot_abandon_an_order_whose_worker_is_still_inside_the_tool(
    tmp_path: Path,
) -> None:
    """Settling an unknown while its worker is still in the tool leaves no row under an abandoned order."""
    await approve_up_to(tmp_path, 1)
    signals = Signals()
    signals.release.clear()
    worlds = [approval_world(tmp_path), approval_world(tmp_path), approval_world(tmp_path)]
    try:
        first = slow_loop(worlds[0], signals)
        second = slow_loop(worlds[1], signals)
        running = asyncio.create_task(worlds[0].start(first))
        await signals.tool_entered.wait()

        # A second resumer meets the claimed key and stops: the outcome is unknown to it.
        stopped = await worlds[1].start(second)
        assert stopped.stop_reason is StopReason.OUTCOME_UNKNOWN
        [order] = [a for a in stopped.state.actions if a.status is ActionStatus.UNKNOWN]

        # The tester reads the ledger (no row yet, truthfully) and settles it.
        human = open_loop(worlds[2])
        assert worlds[2].ledger is not None
        executed = worlds[2].ledger.count(order.idempotency_key) > 0
        assert not executed
        # The call's key is still leased to a live worker: the harness refuses to guess.
        with pytest.raises(CallMayBeRunningError):
            await human.reconcile(TENANT, RUN, order.action_id, executed=executed, by=TESTER)

        signals.release.set()
        await asyncio.gather(running, return_exceptions=True)
        assert signals.rows == [1]
    finally:
        for w in worlds:
            w.close()
    world = approval_world(tmp_path)
    try:
        result = await recover(world, approve=True)
        assert result.goal_reached
        assert_invariants(world)
    finally:
        world.close()
