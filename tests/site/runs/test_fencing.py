"""Fencing: a worker whose lease was taken over cannot write over the worker that took it.

In-process, the stores are checked directly: with a stale epoch every checkpoint save,
key claim and key completion raises LeaseLostError and stores nothing. With real
processes, worker A is frozen with SIGSTOP in the middle of a run, past its lease;
worker B takes the run over (the epoch bumps) and carries it as far as it can; then A
is woken with SIGCONT. A must not overwrite a checkpoint, must not repeat the order,
and says in its log that it lost the lease.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from approvals.models import Approval, UnknownOutcome
from approvals.services import approval_decide, unknown_reconcile
from audit.selectors import audit_verify
from keelgate.errors import LeaseLostError
from keelgate.idempotency import ClaimStatus, KeyStatus
from keelgate.loop import ActionStatus, Phase
from runs.agents.brokerage import PaperBrokerage
from runs.engine.fencing import Fence
from runs.engine.stores import DjangoCheckpointStore, DjangoIdempotencyStore
from runs.engine.worker import Worker
from runs.models import Checkpoint, IdempotencyRecord, Run, RunStatus
from runs.services import run_start

ROOT = Path(__file__).resolve().parents[3]


def approved_run(op, run_id: str = "f1") -> Run:
    """One paper-trader run driven to its approval in-process and approved: queued again."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 7 ACME", user=op, run_id=run_id)
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    approval = Approval.objects.get(tenant_id="t1", run_id=run_id)
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve", note="go")
    run = Run.objects.get(tenant_id="t1", run_id=run_id)
    assert run.status == RunStatus.QUEUED
    return run


def checkpoint_rows(run_id: str) -> list[tuple[int, int | None, bytes]]:
    """Every stored row as it is on disk (seq, base, the deflated JSON): a refused write changes none."""
    rows = Checkpoint.objects.filter(tenant_id="t1", run_id=run_id).order_by("id")
    return [(seq, base, bytes(data)) for seq, base, data in rows.values_list("seq", "base_seq", "data")]


# -- in-process -----------------------------------------------------------------------


def test_stores_refuse_every_write_of_a_worker_whose_lease_was_taken_over(operator, brokerage_path):
    """Stale epoch: save, claim and complete raise LeaseLostError and store nothing; renew is False."""
    run = approved_run(operator)
    worker_a = Worker(lease_seconds=30, owner="worker-a")
    claim_a = worker_a.claim()
    assert claim_a is not None and claim_a.pk == run.pk
    fence_a = Fence("t1", run.run_id, claim_a.epoch)
    keys_a = DjangoIdempotencyStore(fence=fence_a)
    checkpoints_a = DjangoCheckpointStore(fence=fence_a)
    now = timezone.now()
    status, _ = keys_a.claim(
        "t1", "key-held", owner="worker-a", run_id=run.run_id, action_id="1-2", now=now, lease_seconds=30
    )
    assert status is ClaimStatus.CLAIMED

    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    worker_b = Worker(lease_seconds=30, owner="worker-b")
    claim_b = worker_b.claim()
    assert claim_b is not None and claim_b.pk == run.pk
    assert claim_b.epoch == claim_a.epoch + 1
    fence_b = Fence("t1", run.run_id, claim_b.epoch)

    before = checkpoint_rows(run.run_id)
    projected_seq = Run.objects.get(pk=run.pk).seq
    state = checkpoints_a.load("t1", run.run_id)
    assert state is not None
    state.seq += 1
    with pytest.raises(LeaseLostError):
        checkpoints_a.save(state)
    assert checkpoint_rows(run.run_id) == before
    assert Run.objects.get(pk=run.pk).seq == projected_seq

    with pytest.raises(LeaseLostError):
        keys_a.claim(
            "t1",
            "key-new",
            owner="worker-a",
            run_id=run.run_id,
            action_id="1-3",
            now=timezone.now(),
            lease_seconds=30,
        )
    assert not IdempotencyRecord.objects.filter(tenant_id="t1", key="key-new").exists()

    with pytest.raises(LeaseLostError):
        keys_a.complete("t1", "key-held", owner="worker-a", outcome='{"status":"done"}', now=timezone.now())
    held = IdempotencyRecord.objects.get(tenant_id="t1", key="key-held")
    assert held.status == KeyStatus.IN_FLIGHT.value and held.outcome is None and held.completed_at is None

    assert worker_b.renew(claim_b) is True
    assert worker_a.renew(claim_a) is False
    assert worker_a.release(claim_a, RunStatus.DONE, outcome="completed") is False
    row = Run.objects.get(pk=run.pk)
    assert (row.status, row.lease_owner, row.lease_epoch) == (RunStatus.RUNNING, "worker-b", claim_b.epoch)

    # The worker that holds the lease writes normally, and A stays fenced after it did.
    DjangoCheckpointStore(fence=fence_b).save(state)
    assert [seq for seq, *_ in checkpoint_rows(run.run_id)] == [seq for seq, *_ in before] + [state.seq]
    status, _ = DjangoIdempotencyStore(fence=fence_b).claim(
        "t1",
        "key-new",
        owner="worker-b",
        run_id=run.run_id,
        action_id="1-3",
        now=timezone.now(),
        lease_seconds=30,
    )
    assert status is ClaimStatus.CLAIMED
    state.seq += 1
    with pytest.raises(LeaseLostError):
        checkpoints_a.save(state)
    assert worker_b.release(claim_b, RunStatus.QUEUED) is True


# -- real processes -------------------------------------------------------------------


def spawn_worker(env: dict[str, str], log: Path, *args: str, app_name: str) -> subprocess.Popen[bytes]:
    """A ``keelgate_worker`` process logging to ``log``; ``app_name`` tags its PostgreSQL sessions."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "keelgate_worker", *args],
            cwd=ROOT,
            env={**env, "PGAPPNAME": app_name},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def holds_database_lock(app_name: str) -> bool:
    """Is the (frozen) worker inside a database transaction that would block the other one?"""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'",
                [app_name],
            )
            return bool(cursor.fetchone()[0])
    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()


def stop_outside_locks(pid: int, app_name: str, brokerage: PaperBrokerage) -> None:
    """Leave the SIGSTOPped worker stopped where it holds no database lock and not the
    brokerage's file, and set the brokerage back to ``normal`` meanwhile.

    Frozen inside a transaction, it would make the other worker wait on its lock instead of
    taking over. Frozen while it opens or closes the brokerage's SQLite file, it holds the
    file's WAL index (its last close checkpoints and deletes the WAL), and setting the
    mode fails ("database is locked", "locking protocol"): the mode is set while it is
    stopped, and a refusal lets it run on a little, as a held lock does.
    """
    for _ in range(100):
        _wait_until_stopped(pid)
        if not holds_database_lock(app_name):
            try:
                brokerage.set_mode("normal")
                return
            except sqlite3.OperationalError:
                pass
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)
        os.kill(pid, signal.SIGSTOP)
    pytest.fail("the worker stayed frozen inside a transaction or the brokerage's file")


def _wait_until_stopped(pid: int) -> None:
    """Until the kernel shows ``pid`` stopped: ``kill(SIGSTOP)`` returns before the signal
    takes effect, and a worker still running could take a lock right after the probe."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.0005)
    pytest.fail(f"worker {pid} did not stop")


def wait_for(predicate, timeout: float, interval: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


BEFORE_THE_WRITE = "before-write"
"""Freeze A while it waits for the SQLite write lock of its fenced key claim (SQLite only)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "freeze_after", [0.0, 0.05, 0.15, BEFORE_THE_WRITE], ids=["0ms", "50ms", "150ms", BEFORE_THE_WRITE]
)
def test_a_worker_frozen_past_its_lease_neither_repeats_the_order_nor_overwrites_a_checkpoint(
    operator, child_env, tmp_path, freeze_after
):
    """SIGSTOP A mid-run, B takes over, SIGCONT A: one execution, no replay, A's writes refused."""
    if freeze_after == BEFORE_THE_WRITE and connection.vendor != "sqlite":
        pytest.skip("on PostgreSQL a lock wait happens in the server, where the frozen A would keep the lock")
    run = approved_run(operator)
    brokerage = PaperBrokerage()
    # The order takes 0.3 s at the brokerage, so the later freezes land inside the WRITE.
    brokerage.set_mode("hang", hang_seconds=0.3)
    log_a, log_b = tmp_path / "worker-a.log", tmp_path / "worker-b.log"
    app_a = f"kg-fence-a-{uuid.uuid4().hex[:8]}"
    procs: list[subprocess.Popen[bytes]] = []
    blocker: sqlite3.Connection | None = None
    try:
        worker_a = spawn_worker(
            child_env, log_a, "--lease-seconds", "1", "--poll-seconds", "0.05", app_name=app_a
        )
        procs.append(worker_a)
        if freeze_after == BEFORE_THE_WRITE:
            # Take the write lock the moment A has claimed the run: A reads its
            # checkpoint, then blocks in the busy handler of its fenced key claim, in its
            # own process and holding nothing.
            blocker = sqlite3.connect(connection.settings_dict["NAME"], timeout=5, isolation_level=None)
            deadline = time.monotonic() + 30
            while (
                blocker.execute("SELECT status FROM runs_run WHERE id = ?", (run.pk,)).fetchone()[0]
                != "running"
            ):
                assert time.monotonic() < deadline, f"worker A never claimed the run: {log_a.read_text()}"
                time.sleep(0.001)
            blocker.execute("BEGIN IMMEDIATE")
        assert wait_for(lambda: Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists(), 30), (
            f"worker A never claimed the run: {log_a.read_text()}"
        )
        epoch_a = Run.objects.get(pk=run.pk).lease_epoch
        if freeze_after == BEFORE_THE_WRITE:
            time.sleep(0.5)
            os.kill(worker_a.pid, signal.SIGSTOP)
            blocker.execute("ROLLBACK")
            blocker.close()
            blocker = None
            assert not IdempotencyRecord.objects.filter(tenant_id="t1", run_id=run.run_id).exists(), (
                "A claimed the order's key before the lock was taken"
            )
        else:
            time.sleep(freeze_after)
            os.kill(worker_a.pid, signal.SIGSTOP)
        stop_outside_locks(worker_a.pid, app_a, brokerage)
        frozen = Run.objects.get(pk=run.pk)
        if frozen.status != RunStatus.RUNNING or frozen.lease_epoch != epoch_a:
            pytest.fail(f"A finished before it was frozen ({frozen.status}); the freeze came too late")
        assert wait_for(lambda: Run.objects.get(pk=run.pk).lease_expires_at < timezone.now(), 5, 0.05)

        worker_b = spawn_worker(
            child_env,
            log_b,
            "--once",
            "--lease-seconds",
            "30",
            "--poll-seconds",
            "0.05",
            app_name=f"kg-fence-b-{uuid.uuid4().hex[:8]}",
        )
        procs.append(worker_b)
        assert worker_b.wait(timeout=60) == 0, log_b.read_text()
        after_b = Run.objects.get(pk=run.pk)
        assert after_b.lease_epoch == epoch_a + 1, (
            f"B did not take over: {after_b.lease_epoch} {log_b.read_text()}"
        )
        assert after_b.status in (RunStatus.DONE, RunStatus.WAITING), after_b.status
        snapshot = checkpoint_rows(run.run_id)

        os.kill(worker_a.pid, signal.SIGCONT)
        # A reacts once it runs again: a refused write ("lease lost") or, if it had not
        # read its checkpoint yet, B's finished run ("epoch=<A's> reason=...").
        wait_for(
            lambda: any(m in log_a.read_text() for m in ("lease lost", f"epoch={epoch_a} reason=")), 5, 0.05
        )
        time.sleep(0.3)
        worker_a.terminate()
        worker_a.wait(timeout=15)
        text_a = log_a.read_text()

        # A's wake-up wrote nothing: same checkpoints, same lease, same status.
        assert checkpoint_rows(run.run_id) == snapshot, text_a
        woke = Run.objects.get(pk=run.pk)
        assert (woke.lease_epoch, woke.status) == (after_b.lease_epoch, after_b.status)
        found_finished = f"epoch={epoch_a} reason=goal_reached" in text_a and after_b.status == RunStatus.DONE
        if freeze_after == BEFORE_THE_WRITE:
            assert after_b.status == RunStatus.DONE and "lease lost" in text_a, text_a
        else:
            # A either tried a write and was refused, or woke to find B's finished run.
            assert "lease lost" in text_a or found_finished, text_a

        unknown = list(UnknownOutcome.objects.filter(tenant_id="t1", run_id=run.run_id, settled=False))
        for item in unknown:
            executed = brokerage.entry(item.idempotency_key) is not None
            unknown_reconcile(
                tenant_id="t1", item_id=item.pk, user=operator, executed=executed, note="ledger"
            )
        drain = Worker(lease_seconds=30)
        while drain.run_once():
            pass
        print(f"freeze_after={freeze_after} b_status={after_b.status} unknown={len(unknown)}")
    finally:
        if blocker is not None:
            blocker.close()
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=10)
        brokerage.set_mode("normal")

    final = Run.objects.get(pk=run.pk)
    assert final.status == RunStatus.DONE, (final.status, final.stop_reason)
    rows = checkpoint_rows(run.run_id)
    assert rows[: len(snapshot)] == snapshot
    seqs = [seq for seq, *_ in rows]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    state = DjangoCheckpointStore().load("t1", run.run_id)
    assert state.phase is Phase.DONE and state.seq == seqs[-1]
    if after_b.status == RunStatus.DONE:
        assert rows == snapshot, "the run B finished was written to again"
    order = next(a for a in state.actions if a.tool == "place_order")
    ledger = brokerage.ledger()
    assert [(e.key, e.executions, e.replays) for e in ledger] == (
        [(order.idempotency_key, 1, 0)] if order.status is ActionStatus.DONE else []
    ), (order.status, ledger)
    assert audit_verify(tenant_id="t1").ok
