"""The crash scenario shared by the crash tests: its script, its crashes, its recovery, its invariants.

Three WRITEs over three plan steps, then three final answers of which the verifier
sends the first two back, so one clean run reaches every failpoint window at least
three times (see :data:`CLEAN_RUN_WINDOWS`). Every crash test ends the same way:
:func:`recover` drives the run to its goal with fresh objects over the same files,
settling unknown outcomes from the ledger as a human would, and
:func:`assert_invariants` checks that every WRITE took effect exactly once, or never
and was abandoned by that human.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from keelgate.audit import verify
from keelgate.gateway import ApprovalPolicy
from keelgate.idempotency import KeyStatus
from keelgate.loop import (
    WINDOWS,
    ActionStatus,
    CallableVerifier,
    Failpoints,
    Loop,
    LoopResult,
    LoopState,
    Phase,
    StopConditions,
    StopReason,
    Verdict,
    VerifyRequest,
)
from keelgate.testing import Ledger
from tests.conftest import World, act, answer, buy, quote

__all__ = [
    "CLEAN_RUN_TRACE",
    "CLEAN_RUN_WINDOWS",
    "ORDERS",
    "RUN",
    "SCRIPT",
    "TENANT",
    "TESTER",
    "TOOLS",
    "TOOL_CRASH_ENV",
    "Crash",
    "approve_waiting",
    "assert_invariants",
    "make_world",
    "matrix",
    "open_loop",
    "reconcile_unknowns",
    "recover",
    "wait_for_leases",
]

TENANT = "t1"
RUN = "run-1"
TESTER = "tester"
TOOL_CRASH_ENV = "KEELGATE_TEST_TOOL_CRASH"
"""``before:n`` or ``after:n``: the child process dies inside its n-th place_order call."""

STOP = StopConditions(max_iterations=10)

SCRIPT = (
    act(quote("ACME"), buy("ACME", 10)),
    act(buy("BETA", 5)),
    act(quote("BETA"), buy("ACME", 3, side="sell")),
    answer("draft 1"),
    answer("draft 2"),
    answer("final"),
)

ORDERS: tuple[dict[str, Any], ...] = (
    {"symbol": "ACME", "side": "buy", "quantity": 10},
    {"symbol": "BETA", "side": "buy", "quantity": 5},
    {"symbol": "ACME", "side": "sell", "quantity": 3},
)
"""The place_order arguments of the script, in order."""

TOOLS = ("get_quote", "place_order", "place_order", "get_quote", "place_order")
"""The tools of every planned action of the script, in order."""

_ACTION = ("before_action", "after_gateway_call", "after_action_checkpoint")

CLEAN_RUN_TRACE: tuple[str, ...] = (
    *("after_plan", *_ACTION, *_ACTION, "after_observe"),  # quote ACME, buy 10 ACME
    *("after_plan", *_ACTION, "after_observe"),  # buy 5 BETA
    *("after_plan", *_ACTION, *_ACTION, "after_observe"),  # quote BETA, sell 3 ACME
    *("after_plan", "after_verify") * 3,  # draft 1 (revise), draft 2 (revise), final (accept)
)
"""The windows one uninterrupted run reaches, in order."""

CLEAN_RUN_WINDOWS: Mapping[str, int] = Counter(CLEAN_RUN_TRACE)
"""How often one uninterrupted run reaches each window: every one at least three times."""

OCCURRENCES = (1, 2, 3)


def judge(request: VerifyRequest) -> Verdict:
    """ACCEPT the answer "final"; send every draft back for revision."""
    if request.answer == "final":
        return Verdict.accept("the final answer")
    return Verdict.revise("a draft: write it again")


@dataclass(frozen=True)
class Crash:
    """One crash: the n-th arrival at a failpoint window, or the n-th place_order call.

    ``where`` is a window name, or ``tool_before`` / ``tool_after`` for a death inside
    the tool body before or after its ledger row commits.
    """

    where: str
    occurrence: int

    def __post_init__(self) -> None:
        if self.where not in (*WINDOWS, "tool_before", "tool_after"):
            raise ValueError(f"no such crash point: {self.where}")

    def __str__(self) -> str:
        return f"{self.where}:{self.occurrence}"

    @property
    def in_tool(self) -> bool:
        """True for a death inside the tool body."""
        return self.where.startswith("tool_")

    @property
    def side(self) -> Literal["before", "after"]:
        """``before`` or ``after`` the ledger commit (tool crashes only)."""
        return "before" if self.where == "tool_before" else "after"

    @property
    def raised_window(self) -> str:
        """The ``window`` of the :class:`~keelgate.errors.CrashFailpoint` it raises."""
        return f"tool_{self.side}_commit" if self.in_tool else self.where

    def failpoints(self, mode: Literal["raise", "exit"] = "raise") -> Failpoints:
        """Failpoints that fire for this crash (none for a tool crash)."""
        return Failpoints() if self.in_tool else Failpoints({self.where: self.occurrence}, mode=mode)

    def env(self) -> dict[str, str]:
        """The environment that makes a child process die here."""
        if self.in_tool:
            return {TOOL_CRASH_ENV: f"{self.side}:{self.occurrence}"}
        return {"KEELGATE_FAILPOINT": f"{self.where}:{self.occurrence}"}


def matrix() -> list[Crash]:
    """Every window at its 1st, 2nd and 3rd arrival, and both tool crashes at the 1st-3rd WRITE."""
    windows = [Crash(w, n) for w in WINDOWS for n in OCCURRENCES]
    tools = [Crash(f"tool_{side}", n) for side in ("before", "after") for n in OCCURRENCES]
    return windows + tools


def make_world(root: str | os.PathLike[str], *, policy: ApprovalPolicy | None = None) -> World:
    """The scenario's durable files under ``root`` (objects are built by :func:`open_loop`)."""
    return World(Path(root), list(SCRIPT), policy=policy)


def open_loop(
    world: World,
    *,
    crash: Crash | None = None,
    mode: Literal["raise", "exit"] = "raise",
    failpoints: Failpoints | None = None,
    failpoints_from_env: bool = False,
) -> Loop:
    """A fresh process's loop over the world's files, armed with ``crash`` if given.

    ``failpoints`` replaces the crash's own. Without ``failpoints_from_env`` the loop
    always gets explicit failpoints, so a ``KEELGATE_FAILPOINT`` in the test runner's
    environment cannot leak in.
    """
    kwargs: dict[str, Any] = {"verifier": CallableVerifier(judge), "stop": STOP}
    if failpoints is not None:
        kwargs["failpoints"] = failpoints
    elif not failpoints_from_env:
        kwargs["failpoints"] = crash.failpoints(mode) if crash else Failpoints()
    loop = world.loop(**kwargs)
    if crash is not None and crash.in_tool:
        assert world.ledger is not None
        world.ledger.crash = (crash.side, crash.occurrence, mode)
    return loop


def wait_for_leases(loop: Loop) -> None:
    """A person settles an unknown outcome only once the dead worker's key lease ran out."""
    loop.clock.advance(loop.gateway.lease_seconds + 1)  # type: ignore[attr-defined]


async def reconcile_unknowns(loop: Loop, ledger: Ledger, state: LoopState) -> list[str]:
    """Settle every unknown action as a human who reads the ledger would. Returns their ids."""
    settled = []
    wait_for_leases(loop)
    for action in state.actions:
        if action.status is ActionStatus.UNKNOWN:
            executed = ledger.count(action.idempotency_key) > 0
            await loop.reconcile(TENANT, RUN, action.action_id, executed=executed, by=TESTER)
            settled.append(action.action_id)
    return settled


async def approve_waiting(loop: Loop, state: LoopState) -> list[str]:
    """Approve every action waiting for approval, as the tester. Returns their ids."""
    approved = []
    for action in state.actions:
        if action.status is ActionStatus.AWAITING_APPROVAL:
            loop.approve(TENANT, RUN, action.action_id, by=TESTER)
            approved.append(action.action_id)
    return approved


async def recover(world: World, *, approve: bool = False, max_rounds: int = 12) -> LoopResult:
    """Resume with fresh objects until the goal, reconciling unknowns (and approving) between."""
    for _ in range(max_rounds):
        loop = open_loop(world)
        result: LoopResult = await world.start(loop)
        if result.goal_reached:
            return result
        assert world.ledger is not None
        if result.stop_reason is StopReason.OUTCOME_UNKNOWN:
            assert await reconcile_unknowns(loop, world.ledger, result.state), "unknown, but no action"
            continue
        if approve and result.stop_reason is StopReason.APPROVAL_PENDING:
            assert await approve_waiting(loop, result.state), "pending, but nothing to approve"
            continue
        raise AssertionError(f"recovery stopped on {result.stop_reason.value}")
    raise AssertionError(f"recovery did not reach the goal in {max_rounds} rounds")


def assert_invariants(world: World) -> tuple[str, ...]:
    """Check the finished run over the world's files; return each order's final status.

    Every place_order has exactly one ledger row and is done, or none and was
    abandoned by the tester; the ledger holds nothing else; the key store agrees;
    each step was planned once; the audit chain verifies; the run reached its goal.
    """
    if world.checkpoints is None:
        open_loop(world)
    assert world.checkpoints and world.ledger and world.keys and world.audit
    state = world.checkpoints.load(TENANT, RUN)
    assert state is not None, "no checkpoint"
    assert state.phase is Phase.DONE, f"the run is in phase {state.phase.value}"
    assert state.final_answer == "final"
    assert state.iteration == len(SCRIPT)
    assert [a.tool for a in state.actions] == list(TOOLS)
    assert [v.decision for v in state.verdicts] == ["revise", "revise", "accept"]

    writes = [a for a in state.actions if a.tool == "place_order"]
    assert [a.arguments for a in writes] == list(ORDERS)
    keys = [a.idempotency_key for a in writes]
    assert len(set(keys)) == len(keys), "two orders share a key"

    statuses = []
    for action in writes:
        rows = world.ledger.count(action.idempotency_key)
        record = world.keys.get(TENANT, action.idempotency_key)
        assert record is not None, f"{action.action_id} has no key record"
        if rows == 1:
            assert action.status is ActionStatus.DONE, f"{action.action_id} ran but is {action.status}"
            assert record.status is KeyStatus.COMPLETED
        else:
            assert rows == 0, f"{action.action_id} ran {rows} times"
            assert action.status is ActionStatus.ABANDONED, (
                f"{action.action_id} never ran but is {action.status}"
            )
            assert action.outcome.settled_by == TESTER
            assert record.status is KeyStatus.ABANDONED
            assert record.settled_by == TESTER
        statuses.append(action.status.value)

    done = sum(1 for a in writes if a.status is ActionStatus.DONE)
    assert world.ledger.count() == done, "ledger rows differ from done WRITEs"
    assert set(world.ledger.by_key()) <= set(keys), "a ledger row under a key no order has"

    report = verify(world.audit, TENANT)
    assert report.ok, f"audit chain broken: {report.reason} at {report.first_bad_seq}"
    kinds = Counter(event.kind for event in world.audit.events(TENANT))
    assert kinds["run.started"] == 1
    assert kinds["loop.planned"] == len(SCRIPT), "a step was planned twice (or never)"
    return tuple(statuses)
