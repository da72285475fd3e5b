"""Real process deaths on PostgreSQL: workers SIGKILLed at random moments lose no order.

Twenty approved paper-trader runs are handed to three ``keelgate_worker`` processes. A
seeded random schedule SIGKILLs one worker every 0.2-1.0 s and starts a fresh one in
its place; then the workers run undisturbed until every run is done or waits on an
unknown outcome. Each unknown outcome is reconciled the way a person would: by asking
the brokerage's ledger whether the order exists. Then no key may have been executed
twice or replayed, every run must be done, the ledger must hold exactly the orders the
runs believe executed, and the tenant's audit chain must verify.

Set ``KEELGATE_KILL_SEED`` to replay a schedule; the seed is printed and appears in
every assertion message.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from approvals.models import UnknownOutcome
from approvals.services import unknown_reconcile
from audit.selectors import audit_verify
from keelgate.loop import ActionStatus
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Run, RunStatus
from tests.site.runs._batch import approved_runs, require_postgres

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
RUNS = 20
WORKERS = 3
MAX_KILLS = 10
LEASE_SECONDS = 2
SETTLE_TIMEOUT = 90.0


def spawn_worker(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A ``keelgate_worker`` process with stdout and stderr appended to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "keelgate_worker", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every live child, then SIGKILL what did not exit; reap all."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def statuses(ids: list[str]) -> dict[str, tuple[str, str, str]]:
    """run_id -> (status, phase, stop_reason), for failure messages."""
    return {
        r.run_id: (r.status, r.phase, r.stop_reason)
        for r in Run.objects.filter(run_id__in=ids).order_by("run_id")
    }


def settled(ids: list[str], context: str) -> bool:
    """Every run is done or waiting for a person; a run stopped on an error fails at once."""
    stopped = Run.objects.filter(run_id__in=ids, status=RunStatus.STOPPED).exists()
    assert not stopped, f"{context}: a run stopped on an error: {statuses(ids)}"
    runs = Run.objects.filter(run_id__in=ids)
    return not runs.exclude(status__in=[RunStatus.DONE, RunStatus.WAITING]).exists()


def wait_for(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def busy_slots(procs: list[subprocess.Popen[bytes]], ids: list[str]) -> list[int]:
    """Indexes of the worker processes that hold a run's lease (owner is host:pid:tag)."""
    owners = Run.objects.filter(run_id__in=ids, status=RunStatus.RUNNING).values_list(
        "lease_owner", flat=True
    )
    pids = {int(owner.split(":")[1]) for owner in owners if owner.count(":") >= 2}
    return sorted(i for i, proc in enumerate(procs) if proc.pid in pids)


def reconcile_from_ledger(op, ids: list[str]) -> int:
    """Settle every open unknown outcome by asking the brokerage; return how many."""
    brokerage = PaperBrokerage()
    count = 0
    for item in UnknownOutcome.objects.filter(tenant_id="t1", run_id__in=ids, settled=False):
        executed = brokerage.entry(item.idempotency_key) is not None
        unknown_reconcile(
            tenant_id="t1",
            item_id=item.pk,
            user=op,
            executed=executed,
            note=f"brokerage ledger: {'found' if executed else 'absent'}",
        )
        count += 1
    return count


def check_exactly_once(ids: list[str], context: str) -> None:
    """No replay, every run done, ledger == the orders the runs recorded, chain verifies."""
    ledger = PaperBrokerage().ledger()
    doubled = [(e.key, e.executions, e.replays) for e in ledger if e.executions > 1 or e.replays != 0]
    assert not doubled, f"{context}: a WRITE was sent twice: {doubled}"
    assert len({e.key for e in ledger}) == len(ledger), f"{context}: duplicate ledger keys"
    not_done = {k: v for k, v in statuses(ids).items() if v[0] != RunStatus.DONE}
    assert not not_done, f"{context}: runs not done: {not_done}"
    store = DjangoCheckpointStore()
    executed_keys = set()
    for run_id in ids:
        state = store.load("t1", run_id)
        assert state is not None, f"{context}: {run_id} has no checkpoint"
        orders = [a for a in state.actions if a.tool == "place_order"]
        assert len(orders) == 1, f"{context}: {run_id} planned {len(orders)} orders"
        if orders[0].status is ActionStatus.DONE:
            executed_keys.add(orders[0].idempotency_key)
        else:
            assert orders[0].status is ActionStatus.ABANDONED, f"{context}: {run_id} {orders[0].status}"
    assert {e.key for e in ledger} == executed_keys, (
        f"{context}: ledger {len(ledger)} entries, runs record {len(executed_keys)} executed orders"
    )
    report = audit_verify(tenant_id="t1")
    assert report.ok, f"{context}: audit chain broken: {report}"


def test_random_sigkills_of_workers_never_execute_an_order_twice(operator, child_env, tmp_path):
    """Workers SIGKILLed at random: every run ends done, no key executes twice, chain verifies."""
    require_postgres("SKIP LOCKED claims, several worker processes")
    seed = int(os.environ.get("KEELGATE_KILL_SEED") or time.time_ns() % 2**32)
    print(f"KEELGATE_KILL_SEED={seed}")
    rng = random.Random(seed)
    ctx = f"seed={seed}"
    ids = approved_runs(operator, RUNS, "k", context=ctx)
    # A short hang before the brokerage executes widens the WRITE window, so kills
    # land inside it (unknown outcomes) and not only between steps.
    PaperBrokerage().set_mode("hang", hang_seconds=0.15)
    args = ("--lease-seconds", str(LEASE_SECONDS), "--poll-seconds", "0.05")
    logs = [tmp_path / f"worker{i}.log" for i in range(WORKERS)]
    procs: list[subprocess.Popen[bytes]] = []
    everyone: list[subprocess.Popen[bytes]] = []
    kills = 0
    unknown_seen = 0
    try:
        for i in range(WORKERS):
            procs.append(spawn_worker(child_env, logs[i], *args))
        everyone.extend(procs)
        # Start the schedule once the workers are up and working, not while they boot.
        wait_for(lambda: Run.objects.filter(run_id__in=ids, status=RunStatus.RUNNING).exists(), 30, 0.02)
        while kills < MAX_KILLS and not settled(ids, ctx):
            time.sleep(rng.uniform(0.2, 1.0))
            # Prefer a worker that holds a lease right now (its pid is in the lease
            # owner), so the kill lands inside a step rather than in an idle poll.
            busy = busy_slots(procs, ids)
            victim = rng.choice(busy) if busy else rng.randrange(WORKERS)
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait(timeout=10)
            kills += 1
            procs[victim] = spawn_worker(child_env, logs[victim], *args)
            everyone.append(procs[victim])
        PaperBrokerage().set_mode("normal")
        assert wait_for(lambda: settled(ids, ctx), SETTLE_TIMEOUT), (
            f"{ctx}: runs did not settle within {SETTLE_TIMEOUT}s after {kills} kills: {statuses(ids)}"
        )
        waiting = Run.objects.filter(run_id__in=ids, status=RunStatus.WAITING)
        assert all(r.stop_reason == "outcome_unknown" for r in waiting), (
            f"{ctx}: a run waits for something other than an unknown outcome: {statuses(ids)}"
        )
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            unknown_seen += reconcile_from_ledger(operator, ids)
            if Run.objects.filter(run_id__in=ids).exclude(status=RunStatus.DONE).count() == 0:
                break
            assert time.monotonic() < deadline, (
                f"{ctx}: runs did not finish after reconciling: {statuses(ids)}"
            )
            time.sleep(0.1)
        print(f"{ctx} runs={RUNS} workers={WORKERS} kills={kills} unknown_outcomes={unknown_seen}")
        check_exactly_once(ids, f"{ctx} kills={kills} unknown={unknown_seen}")
        assert unknown_seen == UnknownOutcome.objects.filter(tenant_id="t1").count(), ctx
    finally:
        stop_all(everyone)
        PaperBrokerage().set_mode("normal")
