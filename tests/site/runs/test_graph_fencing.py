"""A graph run's worker frozen past its lease: the one that took over owns the thread; the old writes nothing.

Like ``test_fencing.py``, with the graph trader: worker A is frozen with SIGSTOP inside
the order (the brokerage takes 1.5 s), B takes the run over, then A is woken. A's
checkpoint writes (LangGraph's and Keelgate's) and its key completion are refused, and
the order is executed at most once.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from django.utils import timezone

from approvals.models import Approval, UnknownOutcome
from approvals.services import approval_decide, unknown_reconcile
from runs.agents.brokerage import PaperBrokerage
from runs.engine.worker import Worker
from runs.models import Checkpoint, GraphCheckpoint, GraphWrite, IdempotencyRecord, Run, RunStatus
from runs.services import run_start
from tests.site.runs.test_fencing import spawn_worker, stop_outside_locks, wait_for


def graph_rows(run_id: str) -> tuple[list[tuple[str, str]], int, list[int]]:
    checkpoints = list(
        GraphCheckpoint.objects.filter(tenant_id="t1", thread_id=run_id)
        .order_by("checkpoint_id")
        .values_list("checkpoint_ns", "checkpoint_id")
    )
    writes = GraphWrite.objects.filter(tenant_id="t1", thread_id=run_id).count()
    seqs = list(
        Checkpoint.objects.filter(tenant_id="t1", run_id=run_id).order_by("seq").values_list("seq", flat=True)
    )
    return checkpoints, writes, seqs


@pytest.mark.slow
def test_a_frozen_graph_worker_woken_after_a_takeover_writes_nothing(operator, child_env, tmp_path):
    """SIGSTOP A inside the order, B takes over, SIGCONT A: A's writes are refused, one order."""
    run_start(tenant_id="t1", agent="graph-trader", goal="buy 5 ACME", user=operator, run_id="gf")
    while Worker(lease_seconds=30).run_once():
        pass
    approval = Approval.objects.get(tenant_id="t1", run_id="gf")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="go")
    run = Run.objects.get(tenant_id="t1", run_id="gf")
    brokerage = PaperBrokerage()
    brokerage.set_mode("hang", hang_seconds=1.5)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    app_a = f"kg-gfence-a-{uuid.uuid4().hex[:8]}"
    a = spawn_worker(child_env, log_a, "--lease-seconds", "1", "--poll-seconds", "0.05", app_name=app_a)
    try:
        assert wait_for(lambda: Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists(), 30), (
            log_a.read_text()
        )
        epoch_a = Run.objects.get(pk=run.pk).lease_epoch
        claimed = IdempotencyRecord.objects.filter(tenant_id="t1", run_id="gf", status="in_flight")
        assert wait_for(claimed.exists, 30, 0.002), log_a.read_text()  # A is inside the order's 1.5 s
        os.kill(a.pid, signal.SIGSTOP)
        stop_outside_locks(a.pid, app_a, brokerage)
        frozen = Run.objects.get(pk=run.pk)
        if frozen.status != RunStatus.RUNNING or frozen.lease_epoch != epoch_a:
            pytest.fail(f"A finished before it was frozen ({frozen.status})")
        assert wait_for(lambda: Run.objects.get(pk=run.pk).lease_expires_at < timezone.now(), 5, 0.05)
        b = spawn_worker(
            child_env, log_b, "--once", "--lease-seconds", "30", "--poll-seconds", "0.05", app_name="kg-b"
        )
        assert b.wait(timeout=60) == 0, log_b.read_text()
        after_b = Run.objects.get(pk=run.pk)
        assert after_b.lease_epoch == epoch_a + 1, log_b.read_text()
        # A holds the order's key in flight: B cannot know, and stops for a person.
        assert (after_b.status, after_b.stop_reason) == (RunStatus.WAITING, "outcome_unknown"), (
            log_b.read_text()
        )
        snapshot = graph_rows("gf")
        os.kill(a.pid, signal.SIGCONT)
        assert wait_for(lambda: "lease lost" in log_a.read_text(), 10, 0.05), log_a.read_text()
    finally:
        os.kill(a.pid, signal.SIGCONT)
        a.terminate()
        a.wait(timeout=15)
    assert graph_rows("gf") == snapshot, log_a.read_text()  # not one checkpoint, write or mirror row of A's
    woke = Run.objects.get(pk=run.pk)
    assert (woke.lease_epoch, woke.status) == (after_b.lease_epoch, after_b.status)
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]  # A's call, once


@pytest.mark.slow
def test_a_graph_worker_killed_inside_the_order_leaves_an_unknown_outcome_settled_once(
    operator, child_env, tmp_path
):
    """SIGKILL inside the order: the next worker stops on the in-flight key; settled, the graph ends once."""
    run_start(tenant_id="t1", agent="graph-trader", goal="buy 4 ACME", user=operator, run_id="gk")
    while Worker(lease_seconds=30).run_once():
        pass
    approval = Approval.objects.get(tenant_id="t1", run_id="gk")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="go")
    PaperBrokerage().set_mode("hang", hang_seconds=1.5)
    log = tmp_path / "a.log"
    a = spawn_worker(child_env, log, "--lease-seconds", "1", "--poll-seconds", "0.05", app_name="kg-kill-a")
    claimed = IdempotencyRecord.objects.filter(tenant_id="t1", run_id="gk", status="in_flight")
    try:
        assert wait_for(claimed.exists, 30, 0.002), log.read_text()
    finally:
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=15)
    PaperBrokerage().set_mode("normal")
    assert wait_for(lambda: Run.objects.get(run_id="gk").lease_expires_at < timezone.now(), 5, 0.05)
    while Worker(lease_seconds=30).run_once():
        pass
    run = Run.objects.get(run_id="gk")
    assert (run.status, run.stop_reason) == (RunStatus.WAITING, "outcome_unknown")
    item = UnknownOutcome.objects.get(run_id="gk")
    executed = PaperBrokerage().entry(item.idempotency_key) is not None
    assert not executed  # killed in the brokerage's wait, before its insert
    time.sleep(1.1)  # the dead worker's key lease (its worker lease, 1 s) runs out
    unknown_reconcile(
        tenant_id="t1", item_id=item.pk, user=operator, executed=executed, note="not at the broker"
    )
    while Worker(lease_seconds=30).run_once():
        pass
    assert Run.objects.get(run_id="gk").status == RunStatus.DONE
    assert PaperBrokerage().ledger() == []  # abandoned: never placed behind the person's back
