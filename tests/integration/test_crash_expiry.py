"""Crashes between an expiry's audit event and the checkpoint that records it.

A warning or an escalation appends its event first, then saves the checkpoint. With the
stores in one file (``one_file``) both commit together, so a crash between them leaves
neither and the retry gives exactly one event. With a file per store (``files``) the
event has committed alone, so the retry repeats it: at least once, never lost. Either
way the call runs at most once and only when approved. Each case crashes once in
process (a raised :class:`~keelgate.errors.CrashFailpoint`, objects rebuilt over the same
files) and once as a real process death (``os._exit(137)``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from keelgate.errors import CrashFailpoint
from keelgate.loop import ActionStatus, Failpoints, StopReason
from tests.conftest import World, act, answer, buy
from tests.integration._expiry_child import POLICY

pytestmark = pytest.mark.usefixtures("store_layout")

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_expiry_child.py")
KILLED = 137
WARNING_DUE = 55 * 60
"""Inside the first deadline's warning window (50 to 60 minutes)."""
DEADLINE_PASSED = 60 * 60 + 1


def new_world(root: Path) -> World:
    return World(root, [act(buy()), answer("done")], policy=POLICY)


def events(w: World, kind: str) -> list:
    assert w.audit is not None
    return [e for e in w.audit.events("t1") if e.kind == kind]


def repeats(w: World) -> int:
    """How many events a crash between event and checkpoint leaves: 1 together, 2 apart."""
    return 1 if w.one_file else 2


async def waiting(root: Path) -> World:
    w = new_world(root)
    result = await w.start(w.loop(failpoints=Failpoints()))
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    return w


def approval(w: World):
    assert w.checkpoints is not None
    state = w.checkpoints.load("t1", "run-1")
    assert state is not None
    return state.action("1-1").approval


# -- in process -----------------------------------------------------------------------------


async def test_a_crash_after_the_warning_event_gives_it_again_never_not_at_all(tmp_path):
    """Crash at after_warning_audit: the checkpoint has no warning, the retry gives it; then no more."""
    w = await waiting(tmp_path)
    w.clock.advance(WARNING_DUE)
    with pytest.raises(CrashFailpoint):
        w.loop(failpoints=Failpoints({"after_warning_audit": 1})).warn_expiring("t1", "run-1", "1-1")
    assert approval(w).warned_for is None
    assert len(events(w, "approval.expiring")) == (0 if w.one_file else 1)
    loop = w.loop(failpoints=Failpoints())
    assert loop.warn_expiring("t1", "run-1", "1-1") is True
    assert loop.warn_expiring("t1", "run-1", "1-1") is False
    warnings = events(w, "approval.expiring")
    assert len(warnings) == repeats(w)
    assert {e.body["expires_at"] for e in warnings} == {approval(w).expires_at.isoformat()}
    w.close()


async def test_a_crash_after_the_escalation_event_escalates_once_in_the_state(tmp_path):
    """Crash at after_escalation_audit in expire(): unescalated; the retry escalates; an admin runs it."""
    w = await waiting(tmp_path)
    w.clock.advance(DEADLINE_PASSED)
    with pytest.raises(CrashFailpoint):
        w.loop(failpoints=Failpoints({"after_escalation_audit": 1})).expire("t1", "run-1", "1-1")
    assert approval(w).escalated_to is None
    loop = w.loop(failpoints=Failpoints())
    assert loop.expire("t1", "run-1", "1-1") == "escalated"
    assert loop.expire("t1", "run-1", "1-1") is None
    assert len(events(w, "approval.escalated")) == repeats(w)
    assert approval(w).escalated_to == "admin"
    loop.approve("t1", "run-1", "1-1", by="ada", roles={"approver", "admin"})
    result = await w.start(w.loop(failpoints=Failpoints()))
    assert result.goal_reached and w.ledger is not None and w.ledger.count() == 1
    w.close()


async def test_a_crash_while_a_resume_escalates_leaves_nothing_run(tmp_path):
    """Crash at after_escalation_audit in a resume: the next resume escalates; the second deadline denies."""
    w = await waiting(tmp_path)
    w.clock.advance(DEADLINE_PASSED)
    with pytest.raises(CrashFailpoint):
        await w.start(w.loop(failpoints=Failpoints({"after_escalation_audit": 1})))
    assert approval(w).escalated_to is None
    result = await w.start(w.loop(failpoints=Failpoints()))
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    assert result.state.action("1-1").approval.escalated_to == "admin"
    assert len(events(w, "approval.escalated")) == repeats(w)
    w.clock.advance(30 * 60)
    result = await w.start(w.loop(failpoints=Failpoints()))
    assert result.goal_reached and w.ledger is not None and w.ledger.count() == 0
    assert result.state.action("1-1").status is ActionStatus.DENIED
    w.close()


# -- real process deaths --------------------------------------------------------------------


def run_child(root: Path, step: str, advance: float = 0.0, crash: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "KEELGATE_FAILPOINT"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if crash is not None:
        env["KEELGATE_FAILPOINT"] = crash
    return subprocess.run(
        [sys.executable, str(CHILD), str(root), step, "--advance", str(advance)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def answer_of(child: subprocess.CompletedProcess[str]):
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout)["answer"]


@pytest.mark.slow
def test_a_process_killed_after_the_warning_event_is_warned_for_by_the_next(tmp_path):
    """exit 137 at after_warning_audit; a new process warns (again, with files apart), then never more."""
    assert answer_of(run_child(tmp_path, "start")) == "approval_pending"
    died = run_child(tmp_path, "warn", WARNING_DUE, crash="after_warning_audit:1")
    assert died.returncode == KILLED and died.stdout == "", died.stderr
    assert answer_of(run_child(tmp_path, "warn", WARNING_DUE)) is True
    assert answer_of(run_child(tmp_path, "warn", WARNING_DUE + 60)) is False
    w = new_world(tmp_path)
    w.loop(failpoints=Failpoints())
    assert len(events(w, "approval.expiring")) == repeats(w)
    assert approval(w).warned_for == approval(w).expires_at
    w.close()


@pytest.mark.slow
def test_a_process_killed_after_the_escalation_event_is_escalated_by_the_next(tmp_path):
    """exit 137 at after_escalation_audit; a new process escalates; nothing runs; the next deadline denies."""
    assert answer_of(run_child(tmp_path, "start")) == "approval_pending"
    died = run_child(tmp_path, "expire", DEADLINE_PASSED, crash="after_escalation_audit:1")
    assert died.returncode == KILLED and died.stdout == "", died.stderr
    assert answer_of(run_child(tmp_path, "expire", DEADLINE_PASSED)) == "escalated"
    assert answer_of(run_child(tmp_path, "resume", DEADLINE_PASSED + 60)) == "approval_pending"
    later = DEADLINE_PASSED + timedelta(minutes=31).total_seconds()
    assert answer_of(run_child(tmp_path, "resume", later)) == "goal_reached"
    w = new_world(tmp_path)
    w.loop(failpoints=Failpoints())
    assert len(events(w, "approval.escalated")) == repeats(w)
    assert w.ledger is not None and w.ledger.count() == 0
    assert approval(w).expired
    w.close()
