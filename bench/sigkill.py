"""7. Duplicates under SIGKILL: the same step killed at a random moment, then resumed.

The WRITE of the step inserts a row into a counter in its own SQLite file (WAL,
``synchronous=FULL``), keyed by the trial, and does not deduplicate: two rows for one
trial are a duplicate side effect. Each trial forks a child (from this process, so
imports are already done) that opens its stores, says it is ready, and on "go" runs
the step; once the child says it started, the parent sleeps a uniformly random time
within the step's duration (measured the same way on five clean children) and sends
SIGKILL. A kill that arrives after the child finished does not
count; the trial is repeated with a new id. Then the parent resumes with fresh objects
over the same files:

- LangGraph (``SqliteSaver``, ``durability="sync"``): invoke with ``None`` on the same
  thread (or with the input again if not even the first checkpoint was saved).
- Keelgate: ``run_or_resume``. An outcome it cannot know (the key was claimed but not
  completed when the process died) stops the run for a person; it is counted, and once
  the key's lease has run out (0.5 s here, instead of 300 s) it is reconciled by reading
  the counter, as a person would, and the run resumed to its end.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import Row, prewarm_sqlite, progress, quick, scratch
from bench._scenario import AGENT, AS_OF, GOAL, TENANT, SqliteKeelgate, SqliteLangGraph

BENCH = "7. duplicates under SIGKILL"
LEASE = 0.5
SEED = 7


class Counter:
    """The downstream system: one committed row per execution, no deduplication."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute("PRAGMA busy_timeout = 30000")
        self.db.execute("CREATE TABLE IF NOT EXISTS hits (id INTEGER PRIMARY KEY, trial TEXT)")

    def hit(self, trial: str) -> None:
        self.db.execute("INSERT INTO hits (trial) VALUES (?)", (trial,))

    def count(self, trial: str) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM hits WHERE trial = ?", (trial,)).fetchone()[0])

    def close(self) -> None:
        self.db.close()


# -- the two systems: a child's step, and the parent's resume ------------------------------


def keelgate_child(root: Path, trial: str) -> Callable[[], None]:
    counter = Counter(root / "counter.sqlite3")
    k = SqliteKeelgate(root, effect=lambda _key: counter.hit(trial), lease_seconds=LEASE, prewarm=False)

    def step() -> None:
        asyncio.run(
            k.loop.run_or_resume(goal=GOAL, tenant_id=TENANT, agent_id=AGENT, as_of=AS_OF, run_id=trial)
        )

    return step


def keelgate_resume(root: Path, trial: str) -> dict[str, Any]:
    """Resume to the end; reconcile an unknown outcome from the counter, as a person would."""
    counter = Counter(root / "counter.sqlite3")
    k = SqliteKeelgate(root, effect=lambda _key: counter.hit(trial), lease_seconds=LEASE, prewarm=False)
    outcome: dict[str, Any] = {"unknown": 0, "abandoned": 0}
    try:
        state = k.checkpoints.load(TENANT, trial)
        outcome["write_before_kill"] = counter.count(trial) > 0
        outcome["key_at_kill"] = _key_status(k, state)
        for _ in range(5):
            result = asyncio.run(
                k.loop.run_or_resume(goal=GOAL, tenant_id=TENANT, agent_id=AGENT, as_of=AS_OF, run_id=trial)
            )
            if result.goal_reached:
                break
            if result.stop_reason.value != "outcome_unknown":
                raise RuntimeError(f"Keelgate stopped with {result.stop_reason}")
            outcome["unknown"] += 1
            action = next(a for a in result.state.actions if a.status.value == "unknown")
            time.sleep(LEASE + 0.1)  # the dead owner's lease runs out
            executed = counter.count(trial) > 0
            k.loop.reconcile_now(
                TENANT, trial, action.action_id, executed=executed, by="bench", note="counter"
            )
            outcome["abandoned"] += int(not executed)
        else:
            raise RuntimeError("Keelgate did not finish")
        outcome["executions"] = counter.count(trial)
    finally:
        k.close()
        counter.close()
    return outcome


def _key_status(k: SqliteKeelgate, state: Any) -> str:
    if state is None:
        return "no checkpoint"
    write = next((a for a in state.actions if a.tool == "place_order"), None)
    if write is None:
        return "not planned"
    record = k.keys.get(TENANT, write.idempotency_key)
    return "not claimed" if record is None else record.status.value


def langgraph_child(root: Path, trial: str) -> Callable[[], None]:
    counter = Counter(root / "counter.sqlite3")
    g = SqliteLangGraph(root, effect=lambda _thread: counter.hit(trial), prewarm=False)

    def step() -> None:
        g.graph.invoke({"goal": GOAL}, {"configurable": {"thread_id": trial}}, durability="sync")

    return step


def langgraph_resume(root: Path, trial: str) -> dict[str, Any]:
    """Invoke with None on the same thread (the input again if nothing was saved)."""
    counter = Counter(root / "counter.sqlite3")
    g = SqliteLangGraph(root, effect=lambda _thread: counter.hit(trial), prewarm=False)
    config = {"configurable": {"thread_id": trial}}
    outcome: dict[str, Any] = {"unknown": 0, "abandoned": 0}
    try:
        outcome["write_before_kill"] = counter.count(trial) > 0
        saved = g.saver.get_tuple(config)
        if saved is None:
            out = g.graph.invoke({"goal": GOAL}, config, durability="sync")
        else:
            out = g.graph.invoke(None, config, durability="sync")
        if g.graph.get_state(config).next or (out or {}).get("verdict") != "accept":
            raise RuntimeError("LangGraph did not finish")
        outcome["executions"] = counter.count(trial)
    finally:
        g.close()
        counter.close()
    return outcome


SYSTEMS = {
    "keelgate": (keelgate_child, keelgate_resume),
    "langgraph": (langgraph_child, langgraph_resume),
}


# -- one trial -------------------------------------------------------------------------------


Systems = dict[str, tuple[Callable[[Path, str], Callable[[], None]], Callable[[Path, str], dict[str, Any]]]]
"""Per system: the child's step factory and the parent's resume (bench 9 brings its own)."""


def _fork_step(root: Path, system: str, trial: str, systems: Systems | None = None) -> tuple[int, int, int]:
    """Fork a child that prepares, says ready, waits for go, runs the step and reports."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(ready_r)
            os.close(go_w)
            step = (systems or SYSTEMS)[system][0](root, trial)
            os.write(ready_w, b"r")
            os.read(go_r, 1)
            os.write(ready_w, b"s")  # started: the parent's clock starts when it reads this
            step()
            os.write(ready_w, b"d")
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(ready_w)
    os.close(go_r)
    if os.read(ready_r, 1) != b"r":
        raise RuntimeError("the child did not get ready")
    return pid, ready_r, go_w


def clean_duration(root: Path, system: str, trial: str, systems: Systems | None = None) -> float:
    """How long the step takes in a child, as the parent sees it: from "started" to "done".

    Measured the way a kill is timed (from the parent reading "started"), so the scheduling
    delays of a loaded machine are inside both.
    """
    pid, ready_r, go_w = _fork_step(root, system, trial, systems)
    os.write(go_w, b"g")
    if os.read(ready_r, 1) != b"s":
        raise RuntimeError(f"{system}: the child did not start")
    t = time.perf_counter()
    done = os.read(ready_r, 1)
    elapsed = time.perf_counter() - t
    _, status = os.waitpid(pid, 0)
    os.close(ready_r)
    os.close(go_w)
    if os.waitstatus_to_exitcode(status) != 0 or done != b"d":
        raise RuntimeError(f"{system}: a clean step failed")
    return elapsed


def killed_trial(root: Path, system: str, trial: str, delay: float, systems: Systems | None = None) -> bool:
    """Run the step and SIGKILL it after ``delay``; True if the kill landed before it finished."""
    pid, ready_r, go_w = _fork_step(root, system, trial, systems)
    os.write(go_w, b"g")
    if os.read(ready_r, 1) != b"s":
        raise RuntimeError(f"{system}: the child did not start")
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(ready_r)
    os.close(go_w)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def run() -> list[Row]:
    kills = 20 if quick() else 100
    rng = random.Random(SEED)
    rows = []
    with scratch("sigkill") as root:
        holders = [
            prewarm_sqlite(root / name)
            for name in (
                "checkpoints.sqlite3",
                "keys.sqlite3",
                "audit.sqlite3",
                "langgraph.sqlite3",
                "counter.sqlite3",
            )
        ]
        try:
            SqliteKeelgate(root, prewarm=False).close()  # schemas, before any child races to make them
            SqliteLangGraph(root, prewarm=False).close()
            Counter(root / "counter.sqlite3").close()
            durations = {
                s: statistics.median(clean_duration(root, s, f"clean-{s}-{i}") for i in range(5))
                for s in SYSTEMS
            }
            took = ", ".join(f"{s} {d * 1e3:.1f} ms" for s, d in durations.items())
            progress(f"{BENCH}: a clean step takes {took}")
            stats: dict[str, dict[str, Any]] = {
                s: {
                    "kills": 0,
                    "missed": 0,
                    "duplicates": 0,
                    "unknown": 0,
                    "abandoned": 0,
                    "lost": 0,
                    "write_before_kill": 0,
                    "trials_with_duplicate": 0,
                    "key_at_kill": {},
                }
                for s in SYSTEMS
            }
            attempt = 0
            while min(st["kills"] for st in stats.values()) < kills and attempt < kills * 4:
                attempt += 1
                order = list(SYSTEMS) if attempt % 2 else list(reversed(SYSTEMS))
                for system in order:
                    st = stats[system]
                    if st["kills"] >= kills:
                        continue
                    trial = f"{system}-{attempt}"
                    if not killed_trial(root, system, trial, rng.uniform(0, durations[system])):
                        st["missed"] += 1
                        continue
                    st["kills"] += 1
                    outcome = SYSTEMS[system][1](root, trial)
                    executions = outcome["executions"]
                    st["duplicates"] += max(0, executions - 1)
                    st["trials_with_duplicate"] += int(executions > 1)
                    st["lost"] += int(executions == 0 and not outcome["abandoned"])
                    st["unknown"] += outcome["unknown"]
                    st["abandoned"] += outcome["abandoned"]
                    st["write_before_kill"] += int(outcome["write_before_kill"])
                    if "key_at_kill" in outcome:
                        where = st["key_at_kill"]
                        where[outcome["key_at_kill"]] = where.get(outcome["key_at_kill"], 0) + 1
                if attempt % 10 == 0:
                    progress(
                        f"{BENCH}: "
                        + "; ".join(
                            f"{s} {st['kills']} kills, {st['duplicates']} duplicates, {st['unknown']} unknown"
                            for s, st in stats.items()
                        )
                    )
        finally:
            for h in holders:
                h.close()
    for system, label in (
        ("langgraph", "LangGraph, SqliteSaver, durability=sync, resume invoke(None)"),
        ("keelgate", "Keelgate, SQLite stores, resume run_or_resume"),
    ):
        st = stats[system]
        rows.append(
            Row(
                BENCH,
                label,
                "duplicates",
                f"dup/{st['kills']} kills",
                float(st["duplicates"]),
                extra={
                    "duplicates": st["duplicates"],
                    "unknown_outcomes": st["unknown"] if system == "keelgate" else None,
                    **{k: v for k, v in st.items() if k not in ("duplicates",)},
                    "step_ms": durations[system] * 1e3,
                    "seed": SEED,
                },
                note=(
                    f"{st['write_before_kill']} kills landed after the counter row was committed; "
                    f"{st['trials_with_duplicate']} trials executed the WRITE twice; {st['lost']} lost; "
                    f"{st['missed']} kills came too late and were retried"
                    + (
                        f"; unknown outcomes {st['unknown']} (reconciled: {st['abandoned']} abandoned, "
                        f"{st['unknown'] - st['abandoned']} executed); key at kill {st['key_at_kill']}"
                        if system == "keelgate"
                        else ""
                    )
                ),
            )
        )
    return rows
