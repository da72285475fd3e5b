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

A trial must last seconds, not a fraction of one: with 30 runs a 2-process trial took
0.5 to 1.5 s and the ratio said nothing (0.84x to 1.6x in one pass). Batches are 60
runs (QUICK) or 150, every process count runs once per round in a rotated order, the
ratio is taken per round (both trials of a round share the machine's moment) and its
median and range are printed.

Every trial also measures where the machine's two cores went, from ``/proc``: CPU
seconds of the active workers, of PostgreSQL (this database's backends and the
server's background processes), of this process (it prepares nothing while the clock
runs; it polls for the end), and of everything else (other people's tests, other
databases' backends, kernel threads), and of what the hypervisor stole for other guests
(``steal`` in ``/proc/stat``, counted apart: some one-process trials ran a third slower
while "other" held 0.4 of a core, and steal was inside "other" then). A round is *quiet*
when everything else and the steal together used under a quarter of a core in both of
its trials; the ratio over quiet rounds is printed beside the rest. PostgreSQL
runs on the same cores, so two workers cannot reach 2x unless one worker leaves a core
idle: the *ceiling* printed is ``cores / (CPU seconds per run with one worker, workers,
PostgreSQL and this process together)`` runs/s, over the one-process throughput.

A fourth trial runs two workers pinned one per core (worker ``i`` to core ``i``, what
``taskset -c i`` does at start), in the same rounds: on the 2-core VM each shares its
cores with PostgreSQL, and the scheduler moving a worker between them cost two
unpinned workers about a tenth of their throughput (121 against 139 runs/s, the medians
of five rounds when this trial was added). Their PostgreSQL backends stay unpinned,
as a deployment leaves them.

``BENCH_PYSPY=DIR`` attaches ``py-spy record -f raw`` to the active workers of every
trial (files in DIR; slows them, so for finding where time goes, not for figures).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import _pg
from bench._common import REPO, Row, median, prewarm_sqlite, progress, quick

BENCH = "3. worker throughput, PostgreSQL"
TENANT = "wt"
PROCESSES = (1, 2, 4)
Trial = tuple[int, bool]
"""How many workers run, and whether each is pinned to one core (``taskset -c``)."""
TRIALS: tuple[Trial, ...] = ((1, False), (2, False), (2, True), (4, False))
ONE, TWO, TWO_PINNED = TRIALS[:3]
QUIET_CORES = 0.25
"""A round is quiet when everything else used less than this in both of its trials."""


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


class CpuSample:
    """CPU seconds so far, per group of processes, and of the whole machine (``/proc``).

    ``postgres`` is the backends of this database (their pids read at the trial's start;
    they live through it) and the server's background processes (WAL writer,
    checkpointer, ...): what these workers make PostgreSQL do. Other databases'
    backends, on the same server, count as ``other``.
    """

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, workers: list[int], postgres: list[int]) -> None:
        self.when = time.perf_counter()
        self.workers = {pid: _proc_cpu(pid) for pid in workers}
        self.postgres = {pid: _proc_cpu(pid) for pid in postgres}
        self.me = _proc_cpu(os.getpid())
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
        self.machine = (sum(fields[:8]) - fields[3] - fields[4]) / self.TICK
        self.steal = fields[7] / self.TICK  # the hypervisor gave the core to another guest

    def since(self, before: CpuSample) -> dict[str, float]:
        """Cores busy on average between ``before`` and this sample, per group."""
        wall = self.when - before.when

        def delta(now: dict[int, float], then: dict[int, float]) -> float:
            return sum(max(0.0, now[pid] - then[pid]) for pid in then if pid in now)

        got = {
            "workers": delta(self.workers, before.workers) / wall,
            "postgres": delta(self.postgres, before.postgres) / wall,
            "bench": (self.me - before.me) / wall,
            "machine": (self.machine - before.machine) / wall,
            "steal": (self.steal - before.steal) / wall,
        }
        mine = got["workers"] + got["postgres"] + got["bench"] + got["steal"]
        got["other"] = max(0.0, got["machine"] - mine)
        return got


def _proc_cpu(pid: int) -> float:
    """utime + stime of a process in seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CpuSample.TICK


def _postgres_pids(conn: Any) -> list[int]:
    """This database's backends and the server's background processes (on this machine)."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() OR datname IS NULL"
    ).fetchall()
    return [int(pid) for (pid,) in rows]


def _pyspy(
    procs: list[tuple[subprocess.Popen[bytes], Path]], n: int, label: str
) -> list[subprocess.Popen[bytes]]:
    """py-spy recorders on the first ``n`` workers when ``BENCH_PYSPY`` names a folder."""
    folder = os.environ.get("BENCH_PYSPY")
    if not folder:
        return []
    Path(folder).mkdir(parents=True, exist_ok=True)
    spy = str(Path(sys.executable).with_name("py-spy"))
    recorders = [
        subprocess.Popen(
            [
                spy,
                "record",
                "-f",
                "raw",
                "-r",
                "250",
                "-o",
                f"{folder}/{label}-w{i}.txt",
                "--pid",
                str(p.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i, (p, _) in enumerate(procs[:n])
    ]
    time.sleep(1.0)  # attached before the clock starts
    return recorders


_WAITS = """
SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || ':' || wait_event, 'active (CPU)')
            ELSE state END, count(*)
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
GROUP BY 1
"""
"""What this database's other backends are doing at one instant (``idle`` = waiting for the worker)."""

_DONE = """
SELECT count(*) FROM unnest(%s::text[]) AS batch(run_id)
WHERE (SELECT status FROM runs_run WHERE tenant_id = %s AND runs_run.run_id = batch.run_id) = 'done'
"""
"""How many of the batch are done: one lookup per run by its unique key.

Polled every 10 ms while the workers run, so it must cost the server next to nothing.
Written as ``run_id = ANY(...)``, or as a join the planner may hash, PostgreSQL walked
the tenant's every done run (the ``run_list`` index; its statistics lag behind a batch
just made), 2 to 10 ms per poll by round 3: up to half a core taken from the workers it
measured, and more with every round. A scalar subquery per run is not flattened.
"""


def nice() -> int:
    """``BENCH_NICE`` (default -10 when root, else 0): the priority of the workers and their backends."""
    default = "-10" if os.geteuid() == 0 else "0"
    return int(os.environ.get("BENCH_NICE", default))


def _prioritise(conn: Any, workers: list[int]) -> None:
    """Give the workers and this database's backends ``nice()``, ahead of other people's tests.

    The machine is shared: a test suite at the default priority takes a core from two
    workers but not from one, and the ratio measured the neighbours. At nice -10 the
    scheduler gives the measured processes about nine tenths of a contended core.
    """
    if nice() == 0:
        return
    backends = [
        row[0]
        for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchall()
    ]
    for pid in [*workers, *backends]:
        # Linux's nice is per thread: every thread of the process (a worker serves in one).
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), nice())


def _pin(procs: list[tuple[subprocess.Popen[bytes], Path]], n: int, pinned: bool) -> None:
    """Pin the first ``n`` workers one per core (worker ``i`` to core ``i % cores``), as
    ``taskset -c`` does, or let every worker run on any core (every thread: affinity is
    per thread on Linux, and a worker's threads started before)."""
    cpus = sorted(os.sched_getaffinity(0))
    for i, (proc, _) in enumerate(procs[:n]):
        allowed = {cpus[i % len(cpus)]} if pinned else set(cpus)
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                os.sched_setaffinity(int(tid), allowed)


def _name(t: Trial) -> str:
    n, pinned = t
    name = f"{n} keelgate_worker process{'es' if n > 1 else ''}"
    return f"{name}, one per core (taskset -c)" if pinned else name


def trial(
    user: Any,
    n: int,
    batch: int,
    procs: list[tuple[subprocess.Popen[bytes], Path]],
    label: str = "",
    *,
    pinned: bool = False,
) -> tuple[float, dict[str, float]]:
    """Runs per second for the first ``n`` worker processes over one batch, and the cores used."""
    import psycopg
    from django.db import transaction

    from approvals.models import Approval, ApprovalStatus
    from approvals.services import approval_decide

    _pause(procs, 0)
    _pg.maintain()
    t0 = time.perf_counter()
    ids = _prepare(user, batch)
    pending = list(
        Approval.objects.filter(tenant_id=TENANT, run_id__in=ids, status=ApprovalStatus.PENDING).values_list(
            "pk", flat=True
        )
    )
    active = [p.pid for p, _ in procs[:n]]
    with psycopg.connect(_pg.BENCH_URL, autocommit=True) as conn:
        _prioritise(conn, [p.pid for p, _ in procs])
        with transaction.atomic():  # every run becomes runnable at the commit
            for pk in pending:
                approval_decide(tenant_id=TENANT, approval_id=pk, user=user, decision="approve")
            _pause(procs, n)
            _pin(procs, n, pinned)
            recorders = _pyspy(procs, n, label) if label else []
            pg_pids = _postgres_pids(conn)
            before = CpuSample(active, pg_pids)
        start = time.perf_counter()
        deadline = time.monotonic() + 600
        waits: Counter[str] = Counter()
        while True:
            done = conn.execute(_DONE, (ids, TENANT)).fetchone()[0]
            if done == batch:
                break
            for what, count in conn.execute(_WAITS).fetchall():
                waits[what] += count
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
                raise RuntimeError(f"only {done} of {batch} runs finished")
            time.sleep(0.01)
        elapsed = time.perf_counter() - start
        cores = CpuSample(active, pg_pids).since(before)
    for r in recorders:
        r.send_signal(signal.SIGINT)
        r.wait(timeout=60)
    progress(
        f"{BENCH}: {n} process(es): {batch} runs in {elapsed:.2f}s = {batch / elapsed:.1f} runs/s "
        f"(prepared in {start - t0:.1f}s); cores busy: workers {cores['workers']:.2f}, "
        f"postgres {cores['postgres']:.2f}, bench {cores['bench']:.2f}, other {cores['other']:.2f}, "
        f"stolen by the hypervisor {cores['steal']:.2f} "
        f"(machine {cores['machine']:.2f} of {os.cpu_count()})"
    )
    sampled = sum(waits.values()) or 1
    progress(
        f"{BENCH}: {n} process(es): backends sampled {sampled} times: "
        + ", ".join(f"{what} {count / sampled:.0%}" for what, count in waits.most_common(6))
    )
    cores["cpu_ms_per_run"] = (cores["workers"] + cores["postgres"] + cores["bench"]) * elapsed / batch * 1e3
    return batch / elapsed, cores


def run() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH, f"not measured: {why}", "", "", None)]
    _pg.setup_django()
    batch, rounds = (60, 3) if quick() else (150, 5)
    logs = _pg.scratch_dir() / "worker-logs"
    logs.mkdir(exist_ok=True)
    holder = prewarm_sqlite(Path(_pg.django_env()["KEELGATE_PAPER_BROKERAGE"]))
    user = _approver()
    procs = _start_workers(max(PROCESSES), logs)
    values: dict[Trial, list[float]] = {t: [] for t in TRIALS}
    cores: dict[Trial, list[dict[str, float]]] = {t: [] for t in TRIALS}
    try:
        _wait_ready(procs)
        progress(f"{BENCH}: {len(procs)} workers up; warm-up batches")
        for n in PROCESSES:  # imports, first queries, every worker's connections (untimed)
            trial(user, n, 4 * n, procs)
        for r in range(rounds):
            order = TRIALS[r % len(TRIALS) :] + TRIALS[: r % len(TRIALS)]
            for t in order:
                n, pinned = t
                name = f"r{r}-n{n}{'p' if pinned else ''}"
                value, used = trial(user, n, batch, procs, label=name, pinned=pinned)
                values[t].append(value)
                cores[t].append(used)
            summary = ", ".join(
                f"{t[0]} proc{' pinned' if t[1] else ''} {values[t][-1]:.1f} runs/s" for t in TRIALS
            )
            last = {t: values[t][-1] / values[ONE][-1] for t in (TWO, TWO_PINNED)}
            progress(
                f"{BENCH}: round {r + 1}/{rounds}: {summary};"
                f" 1->2 {last[TWO]:.2f}x, pinned {last[TWO_PINNED]:.2f}x"
            )
    finally:
        _pause(procs, len(procs))
        _stop(procs)
        holder.close()
    base = median(values[ONE])
    cpus = os.cpu_count() or 1
    per_run = median([c["cpu_ms_per_run"] for c in cores[ONE]])
    ceiling = min(2.0, cpus / (per_run / 1e3) / base)
    rows = []
    for t in TRIALS:
        n, _ = t
        m = median(values[t])
        ratios = [v / b for v, b in zip(values[t], values[ONE], strict=True)]
        quiet = [
            r
            for r, c, b in zip(ratios, cores[t], cores[ONE], strict=True)
            if max(c["other"] + c["steal"], b["other"] + b["steal"]) < QUIET_CORES
        ]
        quiet_note = (
            f"quiet rounds {len(quiet)}: median {median(quiet):.2f}x; " if quiet else "no quiet round; "
        )
        used = {
            k: median([c[k] for c in cores[t]]) for k in ("workers", "postgres", "bench", "other", "steal")
        }
        note = (
            f"per-round ratio median {median(ratios):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x "
            f"over {rounds} rounds; {quiet_note}"
            if n > 1
            else f"CPU per run {per_run:.1f} ms (workers, PostgreSQL, bench); ceiling on {cpus} cores "
            f"{ceiling:.2f}x for 2 processes; "
        ) + (
            f"cores busy: workers {used['workers']:.2f}, postgres {used['postgres']:.2f}, "
            f"bench {used['bench']:.2f}, other {used['other']:.2f}, stolen {used['steal']:.2f}"
        )
        rows.append(
            Row(
                BENCH,
                f"{_name(t)} (paper-trader, approved, batch {batch})",
                "throughput",
                "runs/s",
                m,
                values[t],
                ratio=m / base if n > 1 else None,
                ratio_to="vs 1 process" if n > 1 else "",
                extra={
                    "batch": batch,
                    "scaling": f"{m / base:.2f}x",
                    "cpus": cpus,
                    "round_ratios": ratios,
                    "cores": cores[t],
                    "pinned": t[1],
                    "ceiling_2": ceiling,
                    "quiet_round_ratios": quiet,
                },
                note=note,
            )
        )
    return rows
