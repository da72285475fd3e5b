"""9. A LangGraph graph with a WRITE tool under SIGKILL: ToolNode against GatedToolNode.

The same graph on both sides (``keelgate.contrib.langgraph.testing.order_graph``: a
scripted chat model asks for one ``place_order``, the tools node runs it, the model
finishes). The tool inserts a row into the counter of benchmark 7 (its own SQLite file,
no deduplication), so two rows for one trial are a duplicate side effect. Each trial
forks a child, starts the graph, and the parent SIGKILLs it at a uniformly random moment
within the clean run's duration (bench 7's machinery); kills that land after the child
finished are retried with a new trial. Then the parent resumes with fresh objects:

- LangGraph: ``ToolNode`` and ``SqliteSaver``, ``durability="sync"``; ``invoke(None)`` on
  the thread (the input again if nothing was saved).
- Keelgate: ``GatedToolNode`` over a ``Gateway`` (``SqliteStores``) and ``KeelgateSaver``
  on the same file. A key left in flight stops the graph with an unknown-outcome
  interrupt; it is counted, and settled by asking the downstream (the counter), as a
  person would, with ``Command(resume={"decision": "executed" | "not_executed"})``.

``kill="after_effect"`` (the test's deterministic window) kills the child with SIGKILL
from inside the tool, right after the counter row is committed.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from bench._common import Row, progress, quick, scratch
from bench.sigkill import Counter, Systems, clean_duration, killed_trial

BENCH = "9. LangGraph graph, WRITE tool, SIGKILL"
SEED = 9
TENANT = "bench"
SCRIPT = [[{"name": "place_order", "args": {"symbol": "ACME", "side": "buy", "quantity": 10}}]]
INPUT: Any = {"messages": [("user", "buy 10 ACME")]}


class Order(BaseModel):
    """The order's arguments (both sides validate the same schema)."""

    model_config = ConfigDict(extra="forbid")
    symbol: str
    side: str
    quantity: int


def _effect(counter: Counter, trial: str, suicide: bool) -> Callable[[], None]:
    def hit() -> None:
        counter.hit(trial)
        if suicide:
            os.kill(os.getpid(), signal.SIGKILL)

    return hit


# -- LangGraph: ToolNode + SqliteSaver ---------------------------------------------------------


class LangGraphSide:
    """ToolNode and LangGraph's SqliteSaver over ``root/langgraph-graph.sqlite3``."""

    def __init__(self, root: Path, effect: Callable[[], None]) -> None:
        import sqlite3

        from langchain_core.tools import StructuredTool
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.prebuilt import ToolNode

        from keelgate.contrib.langgraph.testing import order_graph

        def place_order(symbol: str, side: str, quantity: int) -> dict[str, Any]:
            effect()
            return {"symbol": symbol, "filled": quantity}

        tool = StructuredTool.from_function(place_order, args_schema=Order, description="Place an order.")
        self.conn = sqlite3.connect(str(root / "langgraph-graph.sqlite3"), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.graph = order_graph(ToolNode([tool]), SCRIPT).compile(checkpointer=self.saver)

    def close(self) -> None:
        self.conn.close()


# -- Keelgate: GatedToolNode + KeelgateSaver -----------------------------------------------------


class KeelgateSide:
    """GatedToolNode over SqliteStores and KeelgateSaver, all in ``root/keelgate-graph.sqlite3``."""

    def __init__(self, root: Path, effect: Callable[[], None]) -> None:
        from keelgate.contrib.langgraph import GatedToolNode, KeelgateSaver
        from keelgate.contrib.langgraph.testing import order_graph
        from keelgate.gateway import Gateway, Grants, SideEffect, Tool
        from keelgate.sqlite import SqliteStores

        def place_order(args: Order, call: Any) -> dict[str, Any]:
            effect()
            return {"symbol": args.symbol, "filled": args.quantity}

        self.stores = SqliteStores(root / "keelgate-graph.sqlite3")
        gateway = Gateway(
            [Tool("place_order", SideEffect.WRITE, Order, place_order, "Place an order.")],
            grants=Grants({"trader": ["place_order"]}),
            idempotency=self.stores.idempotency,
            audit=self.stores.audit,
        )
        self.saver = KeelgateSaver.sqlite(self.stores.database, tenant_id=TENANT)
        node = GatedToolNode(gateway, agent_id="trader", tenant_id=TENANT)
        self.graph = order_graph(node, SCRIPT).compile(checkpointer=self.saver)

    def close(self) -> None:
        self.stores.close()


SIDES: dict[str, type[LangGraphSide] | type[KeelgateSide]] = {
    "langgraph": LangGraphSide,
    "keelgate": KeelgateSide,
}


def _config(trial: str) -> Any:
    return {"configurable": {"thread_id": trial}}


def child(system: str, *, suicide: bool = False) -> Callable[[Path, str], Callable[[], None]]:
    """The child's step factory: open the side, then on "go" run the graph from its input."""

    def make(root: Path, trial: str) -> Callable[[], None]:
        counter = Counter(root / "counter.sqlite3")
        side = SIDES[system](root, _effect(counter, trial, suicide))

        def step() -> None:
            side.graph.invoke(INPUT, _config(trial), durability="sync")

        return step

    return make


def resume(system: str) -> Callable[[Path, str], dict[str, Any]]:
    """The parent's resume with fresh objects; Keelgate's unknown outcomes settled from the counter."""

    def go(root: Path, trial: str) -> dict[str, Any]:
        from langgraph.types import Command

        counter = Counter(root / "counter.sqlite3")
        side = SIDES[system](root, _effect(counter, trial, False))
        config = _config(trial)
        outcome: dict[str, Any] = {
            "unknown": 0,
            "abandoned": 0,
            "write_before_kill": counter.count(trial) > 0,
        }
        try:
            start: Any = INPUT if side.saver.get_tuple(config) is None else None
            out = side.graph.invoke(start, config, durability="sync")
            for _ in range(3):
                stops = out.get("__interrupt__") or []
                if not stops:
                    break
                if stops[0].value.get("kind") != "unknown_outcome":
                    raise RuntimeError(f"{system}: unexpected interrupt {stops[0].value}")
                outcome["unknown"] += 1
                executed = counter.count(trial) > 0  # ask the downstream, as a person would
                outcome["abandoned"] += int(not executed)
                verdict = "executed" if executed else "not_executed"
                out = side.graph.invoke(Command(resume={"decision": verdict, "by": "bench"}), config)
            if side.graph.get_state(config).next:
                raise RuntimeError(f"{system}: the graph did not finish")
            outcome["executions"] = counter.count(trial)
        finally:
            side.close()
            counter.close()
        return outcome

    return go


def systems(*, suicide: bool = False) -> Systems:
    """Both sides for bench 7's fork helpers."""
    return {s: (child(s, suicide=suicide), resume(s)) for s in SIDES}


def prepare(root: Path) -> None:
    """Schemas, before any child races to make them."""
    for side in SIDES.values():
        side(root, lambda: None).close()
    Counter(root / "counter.sqlite3").close()


def measure(root: Path, kills: int, *, seed: int = SEED, kill: str = "random") -> dict[str, dict[str, Any]]:
    """``kills`` SIGKILLed trials per side; per side: kills, duplicates, unknown outcomes, ..."""
    rng = random.Random(seed)
    chosen = systems(suicide=kill == "after_effect")
    durations = {
        s: statistics.median(clean_duration(root, s, f"clean-{s}-{i}", systems()) for i in range(3))
        for s in SIDES
    }
    stats = {
        s: {
            "kills": 0,
            "missed": 0,
            "duplicates": 0,
            "unknown": 0,
            "abandoned": 0,
            "lost": 0,
            "write_before_kill": 0,
        }
        for s in SIDES
    }
    attempt = 0
    while min(st["kills"] for st in stats.values()) < kills and attempt < kills * 5:
        attempt += 1
        for system in list(SIDES) if attempt % 2 else list(reversed(SIDES)):
            st = stats[system]
            if st["kills"] >= kills:
                continue
            trial = f"{system}-{kill}-{seed}-{attempt}"
            delay = (
                durations[system] * 3 + 0.3 if kill == "after_effect" else rng.uniform(0, durations[system])
            )
            if not killed_trial(root, system, trial, delay, chosen):
                st["missed"] += 1
                continue
            st["kills"] += 1
            outcome = chosen[system][1](root, trial)
            executions = outcome["executions"]
            st["duplicates"] += max(0, executions - 1)
            st["lost"] += int(executions == 0 and not outcome["abandoned"])
            st["unknown"] += outcome["unknown"]
            st["abandoned"] += outcome["abandoned"]
            st["write_before_kill"] += int(outcome["write_before_kill"])
    for system, st in stats.items():
        st["step_ms"] = durations[system] * 1e3
    return stats


def run() -> list[Row]:
    kills = 20 if quick() else 100
    with scratch("graph-sigkill") as root:
        prepare(root)
        stats = measure(root, kills)
    progress(f"{BENCH}: " + "; ".join(f"{s} {st}" for s, st in stats.items()))
    rows = []
    for system, label in (
        ("langgraph", "LangGraph ToolNode + SqliteSaver, resume invoke(None)"),
        ("keelgate", "GatedToolNode + KeelgateSaver, unknown outcomes settled from the downstream"),
    ):
        st = stats[system]
        rows.append(
            Row(
                BENCH,
                label,
                "duplicates",
                f"dup/{st['kills']} kills",
                float(st["duplicates"]),
                extra={**st, "seed": SEED},
                note=(
                    f"{st['write_before_kill']} kills after the counter row committed; {st['lost']} lost; "
                    f"{st['missed']} kills too late, retried"
                    + (
                        f"; unknown outcomes {st['unknown']} (settled: {st['abandoned']} not executed, "
                        f"{st['unknown'] - st['abandoned']} executed)"
                        if system == "keelgate"
                        else ""
                    )
                ),
            )
        )
    return rows
