"""One trace per run across processes: a worker dies inside a WRITE, another resumes the run.

The first process is killed (``os._exit``) right after the order reached the ledger,
inside the tool; the second resumes from the checkpoint, finds the key in flight
(an unknown outcome), and drives the run to its goal as a person would, settling the
outcome from the ledger. Both processes export every span they finished to one file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keelgate.tracing import otel_trace_id
from tests.integration._scenario import TOOL_CRASH_ENV, make_world, open_loop

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("store_layout")]

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_traced_child.py")


def run_child(root: Path, spans: Path, *args: str, env: dict[str, str] | None = None) -> int:
    child_env = {k: v for k, v in os.environ.items() if k not in ("KEELGATE_FAILPOINT", TOOL_CRASH_ENV)}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    child_env |= env or {}
    done = subprocess.run(
        [sys.executable, str(CHILD), str(root), str(spans), *args],
        cwd=REPO,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 137), done.stderr
    return done.returncode


def test_a_run_killed_in_a_write_and_resumed_elsewhere_is_one_trace(tmp_path):
    """Both processes' spans carry the run's trace id; the resume continues it, the WRITE ran once."""
    spans_file = tmp_path / "spans.jsonl"
    assert run_child(tmp_path, spans_file, env={TOOL_CRASH_ENV: "after:1"}) == 137
    assert run_child(tmp_path, spans_file, "--recover") == 0

    world = make_world(tmp_path)
    open_loop(world)
    assert world.checkpoints is not None and world.ledger is not None
    state = world.checkpoints.load("t1", "run-1")
    assert state is not None
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    first, second = sorted({s["pid"] for s in spans}, key=[s["pid"] for s in spans].index)
    assert {s["trace_id"] for s in spans} == {f"{otel_trace_id(state.trace_id):032x}"}

    killed = [s for s in spans if s["pid"] == first]
    # The killed process finished its plan and its quote; the order's span and its run span never ended.
    assert [s["name"] for s in killed] == ["keelgate.plan", "keelgate.tool_call"]
    assert killed[1]["attributes"]["keelgate.tool"] == "get_quote"

    resumed = [s for s in spans if s["pid"] == second]
    names = [s["name"] for s in resumed]
    runs = [s for s in resumed if s["name"] == "keelgate.run"]
    assert all(r["attributes"]["keelgate.resumed"] for r in runs)
    assert runs[0]["attributes"]["keelgate.stop_reason"] == "outcome_unknown"
    assert runs[-1]["attributes"]["keelgate.stop_reason"] == "goal_reached"
    roots = {r["parent_id"] for r in runs}
    assert len(roots) == 1  # every drive hangs off the run's one root, whichever process
    order = [
        s
        for s in resumed
        if s["name"] == "keelgate.tool_call" and s["attributes"]["keelgate.tool"] == "place_order"
    ]
    assert order[0]["attributes"]["keelgate.status"] == "unknown"
    assert order[0]["attributes"]["keelgate.side_effect"] == "write"
    assert order[0]["attributes"]["keelgate.idempotency_key"] == state.actions[1].idempotency_key
    wait = [s for s in resumed if s["name"] == "keelgate.unknown_outcome.wait"]
    assert len(wait) == 1 and wait[0]["attributes"]["keelgate.verdict"] == "executed"
    decisions = [s for s in resumed if s["name"] == "keelgate.decision"]
    assert [d["attributes"]["keelgate.kind"] for d in decisions] == ["loop.reconciled"]
    assert wait[0]["parent_id"] in roots and decisions[0]["parent_id"] in roots
    assert "keelgate.verify" in names
    assert world.ledger.count(state.actions[1].idempotency_key) == 1  # the WRITE ran once
    for span in spans:  # never the arguments (symbol, quantity), nor the goal
        values = " ".join(str(v) for v in span["attributes"].values())
        assert "ACME" not in values and "buy 10" not in values
    world.close()
