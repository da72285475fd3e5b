"""3b. Bench 2's step in 1 and 2 processes at once, PostgreSQL: Keelgate against LangGraph.

What does 1 → 2 processes give on this machine, with PostgreSQL on the same cores, when
nothing but the step runs? Each child process steps in a loop for a fixed time (Keelgate:
``bench.step_postgres.keelgate_step`` on runs made beforehand; LangGraph: the same
graph on ``PostgresSaver``) and counts its steps; the trials of one round rotate their
order, and a row is the median of the summed rates. Set beside bench 3, it says how much
of the workers' scaling the machine allows: the same ratio for LangGraph's step is the
baseline, measured in the same run.

A child starts, builds its runs or graph and warms up untimed, then waits for a file to
appear, so every process of a trial starts its clock at the same moment.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import _pg
from bench._common import Row, median, progress, quick

BENCH = "3b. the step in 1 and 2 processes, PostgreSQL"
REPO = Path(__file__).resolve().parent.parent
SYSTEMS = ("keelgate", "langgraph")


def _seconds() -> float:
    return 2.0 if quick() else 5.0


def child(system: str, go: Path, seconds: float) -> dict[str, float]:
    """In a child process: warm up, wait for ``go``, step for ``seconds``; steps and time."""
    import django

    django.setup()
    if system == "keelgate":
        from bench.step_postgres import _new_runs, keelgate_step

        runner = asyncio.Runner()
        ids = _new_runs(10 + int(seconds * 400))  # more than a fast machine steps meanwhile

        async def steps(ids: list[str], until: float | None) -> int:
            done = 0
            for run_id in ids:
                await keelgate_step(run_id)
                done += 1
                if until is not None and time.monotonic() > until:
                    break
            return done

        runner.run(steps(ids[:10], None))
        _wait_for(go)
        start = time.monotonic()
        done = runner.run(steps(ids[10:], start + seconds))
        if done == len(ids) - 10:
            raise RuntimeError("ran out of runs before the time was up")
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        from bench._scenario import langgraph_graph, langgraph_step

        with PostgresSaver.from_conn_string(os.environ["DATABASE_URL"]) as saver:
            graph = langgraph_graph(saver)
            for _ in range(10):
                langgraph_step(graph)
            _wait_for(go)
            start = time.monotonic()
            done = 0
            while time.monotonic() < start + seconds:
                langgraph_step(graph)
                done += 1
    return {"steps": done, "seconds": time.monotonic() - start}


def _wait_for(go: Path) -> None:
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("never told to start")
        time.sleep(0.002)


def _trial(system: str, processes: int) -> float:
    """Steps per second of ``processes`` children stepping at once, summed."""
    _pg.maintain()
    go = _pg.scratch_dir() / f"go-{time.monotonic_ns()}"
    env = {**os.environ, **_pg.django_env()}
    command = [sys.executable, "-m", "bench.step_processes", system, str(go), str(_seconds())]
    children = [
        subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    try:
        time.sleep(3.0 + _seconds() * 0.8)  # each child makes its runs and warms up
        go.touch()
        rate = 0.0
        for proc in children:
            out, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"a {system} child exited with {proc.returncode}")
            got = json.loads(out.strip().splitlines()[-1])
            rate += got["steps"] / got["seconds"]
        return rate
    finally:
        for proc in children:
            if proc.poll() is None:
                proc.kill()
        go.unlink(missing_ok=True)


def run() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH, f"not measured: {why}", "", "", None)]
    _pg.setup_django()
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(_pg.BENCH_URL) as saver:
        saver.setup()
    rounds = 3 if quick() else 5
    rates: dict[tuple[str, int], list[float]] = {(s, n): [] for s in SYSTEMS for n in (1, 2)}
    for r in range(rounds):
        order = [(s, n) for s in SYSTEMS for n in (1, 2)]
        order = order[r % len(order) :] + order[: r % len(order)]
        for system, n in order:
            rates[(system, n)].append(_trial(system, n))
        summary = ", ".join(
            f"{s} {rates[(s, 1)][-1]:.0f} -> {rates[(s, 2)][-1]:.0f} steps/s "
            f"({rates[(s, 2)][-1] / rates[(s, 1)][-1]:.2f}x)"
            for s in SYSTEMS
        )
        progress(f"{BENCH}: round {r + 1}/{rounds}: {summary}")
    rows = []
    for system in SYSTEMS:
        one, two = rates[(system, 1)], rates[(system, 2)]
        per_round = [b / a for a, b in zip(one, two, strict=True)]
        scaling = median(per_round)
        rows.append(
            Row(
                BENCH,
                f"{'Keelgate, the Django stores' if system == 'keelgate' else 'LangGraph, PostgresSaver'}: "
                "2 processes stepping at once",
                "steps",
                "steps/s",
                median(two),
                two,
                ratio=scaling,
                ratio_to="vs 1 process, per-round median",
                extra={
                    "scaling": f"{scaling:.2f}x",
                    "one_process": median(one),
                    "round_ratios": per_round,
                    "seconds_per_trial": _seconds(),
                },
                note=f"1 process {median(one):.0f} steps/s; per-round ratios "
                + ", ".join(f"{x:.2f}" for x in per_round),
            )
        )
    return rows


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]))), flush=True)
