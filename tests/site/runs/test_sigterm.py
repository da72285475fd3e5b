"""SIGTERM: the worker finishes the current step, checkpoints, releases the lease, exits 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from approvals.models import Approval
from approvals.services import approval_decide
from runs.agents.brokerage import PaperBrokerage
from runs.engine.worker import Worker
from runs.models import IdempotencyRecord, Run, RunStatus
from runs.services import run_start

ROOT = Path(__file__).resolve().parents[3]


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.mark.slow
def test_sigterm_mid_write_finishes_the_step_and_hands_the_run_back(operator, child_env):
    """A worker told to stop while its WRITE hangs finishes it once, requeues the run and exits 0."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 7 ACME", user=operator, run_id="r1")
    Worker().run_once()
    approval = Approval.objects.get(run_id="r1")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
    PaperBrokerage().set_mode("hang", hang_seconds=1.5)
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "keelgate_worker", "--poll-seconds", "0.05"],
        cwd=ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The order's key claimed in flight: the worker is inside the hanging order call now.
        wait_for(lambda: IdempotencyRecord.objects.filter(run_id="r1", status="in_flight").exists())
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, output
    run = Run.objects.get(run_id="r1")
    assert run.status in (RunStatus.QUEUED, RunStatus.DONE), output
    assert run.lease_owner == "" and run.lease_expires_at is None
    PaperBrokerage().set_mode("normal")
    while Worker().run_once():
        pass
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]
