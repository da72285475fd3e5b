"""Real process deaths: a worker calls os._exit(137) at a window or inside the WRITE tool.

Nothing is flushed and no ``finally`` runs, as with a kill. New worker processes then
resume the run until its goal; between them the parent settles unknown outcomes from
the ledger, as a human would. The ledger counts what really happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from keelgate.loop import StopReason
from tests.integration._scenario import (
    TOOL_CRASH_ENV,
    Crash,
    assert_invariants,
    make_world,
    matrix,
    open_loop,
    reconcile_unknowns,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("store_layout")]

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_crash_child.py")
KILLED = 137


def run_child(root: Path, crash: Crash | None = None) -> subprocess.CompletedProcess[str]:
    """One worker process over ``root``, armed with ``crash`` through its environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("KEELGATE_FAILPOINT", TOOL_CRASH_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if crash is not None:
        env |= crash.env()
    return subprocess.run(
        [sys.executable, str(CHILD), str(root)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def settle_from_ledger(root: Path) -> list[str]:
    """The parent, as the human: reconcile every unknown action by reading the ledger."""
    world = make_world(root)
    try:
        loop = open_loop(world)
        assert world.checkpoints is not None and world.ledger is not None
        state = world.checkpoints.load("t1", "run-1")
        assert state is not None
        return await reconcile_unknowns(loop, world.ledger, state)
    finally:
        world.close()


@pytest.mark.parametrize("crash", matrix(), ids=str)
async def test_after_a_real_process_death_every_write_took_effect_once_or_was_abandoned(
    tmp_path: Path, crash: Crash
) -> None:
    """A worker killed (exit 137) at the case's point, new workers finish: each order ran once or never."""
    died = run_child(tmp_path, crash)
    assert died.returncode == KILLED, died.stderr
    assert died.stdout == "", "the killed worker reported a result"

    outcomes: list[dict[str, Any]] = []
    for _ in range(6):
        child = run_child(tmp_path)
        assert child.returncode == 0, child.stderr
        outcome = json.loads(child.stdout)
        outcomes.append(outcome)
        if outcome["goal_reached"]:
            break
        assert outcome["stop_reason"] == StopReason.OUTCOME_UNKNOWN.value, outcomes
        assert await settle_from_ledger(tmp_path), "outcome unknown, but no unknown action"
    else:
        raise AssertionError(f"no goal after {len(outcomes)} workers: {outcomes}")
    assert outcomes[-1]["stop_reason"] == StopReason.GOAL_REACHED.value
    # Only a death inside the tool leaves an outcome unknown, and only once.
    assert len(outcomes) == (2 if crash.in_tool else 1), outcomes

    world = make_world(tmp_path)
    try:
        statuses = assert_invariants(world)
    finally:
        world.close()
    expected = ["done", "done", "done"]
    if crash.where == "tool_before":
        expected[crash.occurrence - 1] = "abandoned"
    assert statuses == tuple(expected)
