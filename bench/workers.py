"""3. Worker throughput: runs per second finished by 1, 2 and 4 ``keelgate_worker`` processes.

Four worker processes start once and are warmed up on a first batch. Each trial then
prepares a batch of paper-trader runs that wait for approval: started with
``runs.services.run_start``, drained once in this process by ``runs.engine.worker.Worker`` (each
stops at its order, which needs a person) while every worker process is frozen
(SIGSTOP, only ever while nothing is runnable). Every approval is decided with
``approvals.services.approval_decide`` inside one outer transaction, N workers are
thawed, and the transaction commits: all runs become runnable at the same instant. The
clock runs from that commit until the last run of the batch is done.

Workers poll every 20 ms instead of 500 ms so that idle polling does not hide the work.
The paper brokerage (the downstream of the WRITE, a SQLite file) is kept open by an idle
connection here, so its WAL is not deleted and regrown between orders.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import _pg
from bench._common import REPO, Row, median, prewarm_sqlite, progress, quick

BENCH = "3. worker throughput, PostgreSQL"
TENANT = "wt"
PROCESSES = (1, 2, 4)


def _approver() -> Any:
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Role, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=TENANT, defaults={"name": "bench"})
    user, created = get_user_model().objects.get_or_create(username="bench-approver")
    if created:
        Membership.objects.create(user=user, tenant=tenant, role=Role.APPROVER)
    return user


def _prepare(user: Any, batch: int) -> list[str]:
    """``batch`` runs, each waiting for its order's approval (untimed)."""
    from runs.engine.worker import Worker
    from runs.models import Run, RunStatus
    from runs.services import run_start

    ids = []
    for _ in range(batch):
        run, _created = run_start(tenant_id=TENANT, agent="paper-trader", goal="buy 10 ACME", user=user)
        ids.append(run.run_id)
    Worker(poll_seconds=0.01).serve(once=True)
    gc.collect()  # each run's event loop left a connection behind
    waiting = Run.objects.filter(tenant_id=TENANT, run_id__in=ids, status=RunStatus.WAITING).count()
    if waiting != batch:
        raise RuntimeError(f"{waiting} of {batch} runs wait for approval after the drain")
    return ids


def _start_workers(n: int, logs: Path) -> list[tuple[subprocess.Popen[bytes], Path]]:
    env = {**os.environ, **_pg.django_env()}
    procs = []
    for i in range(n):
        log = logs / f"worker-{n}-{i}-{time.monotonic_ns()}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "keelgate_worker", "--poll-seconds", "0.02"],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append((proc, log))
    return procs


def _wait_ready(procs: list[tuple[subprocess.Popen[bytes], Path]], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for proc, log in procs:
        while b"keelgate_worker:" not in log.read_bytes():
            if proc.poll() is not None:
                raise RuntimeError(f"a worker exited early: {log.read_text()[-500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start in time")
            time.sleep(0.05)


def _stop(procs: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, _ in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pause(procs: list[tuple[subprocess.Popen[bytes], Path]], active: int) -> None:
    """Let the first ``active`` workers run and freeze the rest (SIGSTOP).

    Only called when nothing is runnable, so a frozen worker is idle between polls and
    holds no row lock (an empty ``SKIP LOCKED`` claim locks nothing).
    """
    for i, (proc, _) in enumerate(procs):
        proc.send_signal(signal.SIGCONT if i < active else signal.SIGSTOP)


def trial(user: Any, n: int, batch: int, procs: list[tuple[subprocess.Popen[bytes], Path]]) -> float:
    """Runs per second for the first ``n`` worker processes over one batch."""
    import psycopg
    from django.db import transaction

    from approvals.models import Approval, ApprovalStatus
    from approvals.services import approval_decide

    _pause(procs, 0)
    t0 = time.perf_counter()
    ids = _prepare(user, batch)
    pending = list(
        Approval.objects.filter(tenant_id=TENANT, run_id__in=ids, status=ApprovalStatus.PENDING).values_list(
            "pk", flat=True
        )
    )
    with transaction.atomic():  # every run becomes runnable at the commit
        for pk in pending:
            approval_decide(tenant_id=TENANT, approval_id=pk, user=user, decision="approve")
        _pause(procs, n)
    start = time.perf_counter()
    with psycopg.connect(_pg.BENCH_URL, autocommit=True) as conn:
        deadline = time.monotonic() + 600
        while True:
            done = conn.execute(
                "SELECT count(*) FROM runs_run WHERE tenant_id = %s AND status = 'done' AND run_id = ANY(%s)",
                (TENANT, ids),
            ).fetchone()[0]
            if done == batch:
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
                raise RuntimeError(f"only {done} of {batch} runs finished")
            time.sleep(0.01)
    elapsed = time.perf_counter() - start
    progress(f"{BENCH}: {n} process(es): {batch} runs done in {elapsed:.2f}s (prepared in {start - t0:.1f}s)")
    return batch / elapsed


def run() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH, f"not measured: {why}", "", "", None)]
    _pg.setup_django()
    batch, rounds = (6, 1) if quick() else (30, 3)
    logs = _pg.scratch_dir() / "worker-logs"
    logs.mkdir(exist_ok=True)
    holder = prewarm_sqlite(Path(_pg.django_env()["KEELGATE_PAPER_BROKERAGE"]))
    user = _approver()
    procs = _start_workers(max(PROCESSES), logs)
    try:
        _wait_ready(procs)
        progress(f"{BENCH}: {len(procs)} workers up; warm-up batch")
        trial(user, max(PROCESSES), 2 * max(PROCESSES), procs)  # imports, first queries (untimed)
        values: dict[int, list[float]] = {n: [] for n in PROCESSES}
        for r in range(rounds):
            order = PROCESSES[r % 3 :] + PROCESSES[: r % 3]
            for n in order:
                values[n].append(trial(user, n, batch, procs))
            summary = ", ".join(f"{n} proc {values[n][-1]:.1f} runs/s" for n in PROCESSES)
            progress(f"{BENCH}: round {r + 1}/{rounds}: {summary}")
    finally:
        _pause(procs, len(procs))
        _stop(procs)
        holder.close()
    base = median(values[1])
    rows = []
    for n in PROCESSES:
        m = median(values[n])
        rows.append(
            Row(
                BENCH,
                f"{n} keelgate_worker process{'es' if n > 1 else ''} (paper-trader, approved, batch {batch})",
                "throughput",
                "runs/s",
                m,
                values[n],
                ratio=m / base if n > 1 else None,
                ratio_to="vs 1 process" if n > 1 else "",
                extra={"batch": batch, "scaling": f"{m / base:.2f}x", "cpus": os.cpu_count()},
            )
        )
    return rows
