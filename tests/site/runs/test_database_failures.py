"""A database that drops connections or is locked during a step leaves no run stuck.

PostgreSQL: the worker's sessions are killed with ``pg_terminate_backend`` again and
again while it works through a batch; it reconnects, backs off, and resumes every run
from its checkpoint (a run caught between the key claim and the key's result waits on
an unknown outcome, which the test reconciles from the brokerage's ledger), and no
order is ever sent twice.

Locked: another connection holds the write lock for two seconds in the middle of the
batch (``BEGIN EXCLUSIVE`` on SQLite, ``LOCK TABLE ... IN EXCLUSIVE MODE`` on
PostgreSQL). Both are shorter than the busy timeout (30 s on SQLite; PostgreSQL waits
for locks indefinitely), so the documented behaviour is: the worker waits, raises no
database error, and carries on.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone

from approvals.models import UnknownOutcome
from approvals.services import unknown_reconcile
from audit.selectors import audit_verify
from keelgate.loop import ActionStatus
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Checkpoint, Run, RunStatus
from tests.site.runs._batch import approved_runs, require_postgres

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
LEASE_SECONDS = 2.0
STUCK_MARGIN = 8.0
"""A run may sit in ``running`` past its lease for at most this long before a claim."""


def spawn_worker(env: dict[str, str], log: Path, app_name: str, lease: float) -> subprocess.Popen[bytes]:
    """One worker process; ``app_name`` becomes the application_name of its PostgreSQL sessions."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "keelgate_worker",
                "--lease-seconds",
                str(lease),
                "--poll-seconds",
                "0.05",
            ],
            cwd=ROOT,
            env={**env, "PGAPPNAME": app_name},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def statuses(ids: list[str]) -> dict[str, tuple[str, str, str]]:
    return {
        r.run_id: (r.status, r.phase, r.stop_reason)
        for r in Run.objects.filter(run_id__in=ids).order_by("run_id")
    }


def stuck_runs(ids: list[str]) -> list[str]:
    """Runs still ``running`` although their lease ran out more than STUCK_MARGIN ago."""
    limit = timezone.now() - timedelta(seconds=STUCK_MARGIN)
    return list(
        Run.objects.filter(run_id__in=ids, status=RunStatus.RUNNING, lease_expires_at__lt=limit).values_list(
            "run_id", flat=True
        )
    )


def finish_all(op, ids: list[str], timeout: float) -> int:
    """Wait for every run to be done, reconciling unknown outcomes from the ledger; return how many."""
    brokerage = PaperBrokerage()
    reconciled = 0
    deadline = time.monotonic() + timeout
    while Run.objects.filter(run_id__in=ids).exclude(status=RunStatus.DONE).exists():
        assert not stuck_runs(ids), (
            f"runs stuck in running past their lease: {stuck_runs(ids)} {statuses(ids)}"
        )
        stopped = Run.objects.filter(run_id__in=ids, status=RunStatus.STOPPED)
        assert not stopped.exists(), f"a run stopped on an error: {statuses(ids)}"
        for item in UnknownOutcome.objects.filter(tenant_id="t1", run_id__in=ids, settled=False):
            if Run.objects.get(tenant_id="t1", run_id=item.run_id).status != RunStatus.WAITING:
                continue
            executed = brokerage.entry(item.idempotency_key) is not None
            unknown_reconcile(tenant_id="t1", item_id=item.pk, user=op, executed=executed, note="ledger")
            reconciled += 1
        assert time.monotonic() < deadline, f"runs did not finish in {timeout}s: {statuses(ids)}"
        time.sleep(0.1)
    return reconciled


def check_exactly_once(ids: list[str], context: str) -> None:
    """No key executed twice or replayed; the ledger holds exactly the runs' executed orders."""
    ledger = PaperBrokerage().ledger()
    assert all(e.executions == 1 and e.replays == 0 for e in ledger), f"{context}: {ledger}"
    store = DjangoCheckpointStore()
    executed = set()
    for run_id in ids:
        state = store.load("t1", run_id)
        orders = [a for a in state.actions if a.tool == "place_order"]
        assert len(orders) == 1, f"{context}: {run_id} has {len(orders)} orders"
        if orders[0].status is ActionStatus.DONE:
            executed.add(orders[0].idempotency_key)
        else:
            assert orders[0].status is ActionStatus.ABANDONED, f"{context}: {run_id} {orders[0].status}"
    assert {e.key for e in ledger} == executed, f"{context}: ledger {len(ledger)} vs executed {len(executed)}"
    assert not Run.objects.filter(run_id__in=ids, status=RunStatus.RUNNING).exists()
    report = audit_verify(tenant_id="t1")
    assert report.ok, f"{context}: {report}"


def test_killed_database_sessions_leave_no_run_stuck_and_no_order_twice(operator, child_env, tmp_path):
    """pg_terminate_backend on the worker's sessions, repeatedly: it reconnects and finishes every run."""
    require_postgres("pg_terminate_backend")
    ids = approved_runs(operator, 12, "d", goal="sell {n} BETA")
    PaperBrokerage().set_mode("hang", hang_seconds=0.1)
    app = f"kg-dbfail-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    worker = spawn_worker(child_env, log, app, LEASE_SECONDS)
    terminated = 0
    try:
        deadline = time.monotonic() + 30
        while not Run.objects.filter(run_id__in=ids, status=RunStatus.RUNNING).exists():
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()
            time.sleep(0.02)
        rounds = 0
        while (
            rounds < 15
            and Run.objects.filter(run_id__in=ids, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).exists()
        ):
            time.sleep(0.3)
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND application_name = %s) AS killed",
                    [app],
                )
                terminated += cursor.fetchone()[0]
            rounds += 1
        PaperBrokerage().set_mode("normal")
        reconciled = finish_all(operator, ids, timeout=60)
        assert worker.poll() is None, f"the worker died: {log.read_text()[-3000:]}"
    finally:
        stop(worker)
        PaperBrokerage().set_mode("normal")
    text = log.read_text()
    print(
        f"terminated_sessions={terminated} rounds={rounds} reconciled={reconciled} "
        f"step_errors={text.count('database error during a step')}"
    )
    assert terminated > 0, "no session of the worker was ever terminated"
    check_exactly_once(ids, f"terminated={terminated} reconciled={reconciled}")


def test_a_locked_database_makes_the_worker_wait_then_carry_on(operator, child_env, tmp_path):
    """The write lock held 2 s mid-batch: the worker waits (no database error) and finishes every run."""
    ids = approved_runs(operator, 8, "l", goal="sell {n} BETA")
    PaperBrokerage().set_mode("hang", hang_seconds=0.15)
    log = tmp_path / "worker.log"
    worker = spawn_worker(child_env, log, f"kg-lock-{uuid.uuid4().hex[:8]}", 5.0)
    try:
        deadline = time.monotonic() + 30
        while not Run.objects.filter(run_id__in=ids, status=RunStatus.DONE).exists():
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()
            time.sleep(0.02)
        remaining = Run.objects.filter(run_id__in=ids).exclude(status=RunStatus.DONE).count()
        if connection.vendor == "sqlite":
            blocker = sqlite3.connect(connection.settings_dict["NAME"], timeout=10, isolation_level=None)
            try:
                blocker.execute("BEGIN EXCLUSIVE")
                held = Checkpoint.objects.count()
                time.sleep(2.0)
                during = Checkpoint.objects.count()
                blocker.execute("ROLLBACK")
            finally:
                blocker.close()
        else:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("LOCK TABLE runs_checkpoint, runs_idempotencyrecord IN EXCLUSIVE MODE")
                held = Checkpoint.objects.count()
                time.sleep(2.0)
                during = Checkpoint.objects.count()
        assert remaining > 0, "the batch finished before the lock was taken"
        assert during == held, "a checkpoint was written through the lock"
        finish_all(operator, ids, timeout=60)
        assert worker.poll() is None, log.read_text()
    finally:
        stop(worker)
        PaperBrokerage().set_mode("normal")
    text = log.read_text()
    assert "database error" not in text and "Traceback" not in text, text
    assert not UnknownOutcome.objects.filter(run_id__in=ids).exists()
    check_exactly_once(ids, "locked")
    assert len(PaperBrokerage().ledger()) == len(ids)
