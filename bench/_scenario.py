"""The one step every system runs: plan, one READ, one WRITE, observe, verify.

Keelgate runs it as a run of its loop: the scripted planner proposes a quote (READ)
and an order (WRITE), both run through the gateway, the loop observes, the planner
answers, the verifier accepts. LangGraph runs the same four steps as a ``StateGraph``
(plan, read, write, verify nodes). Tools are no-ops in both, so only the engines' own
work and their commits are measured; the WRITE can be given a side effect (the SIGKILL
benchmark counts it).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict

from bench._common import prewarm_sqlite
from keelgate.audit import AuditLog, SqliteAuditLog
from keelgate.checkpoint import CheckpointStore, SqliteCheckpointStore
from keelgate.gateway import Gateway, Grants, SideEffect, Tool, ToolCall
from keelgate.idempotency import IdempotencyStore, SqliteIdempotencyStore
from keelgate.loop import Loop, Plan, ProposedAction, StopConditions
from keelgate.sqlite import SqliteDatabase, SqliteStores
from keelgate.testing import ScriptedPlanner

AS_OF = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
TENANT = "bench"
AGENT = "trader"
GOAL = "buy 10 ACME"
ORDER = {"symbol": "ACME", "side": "buy", "quantity": 10}

SCRIPT = (
    Plan(
        actions=[
            ProposedAction("get_quote", {"symbol": "ACME"}, "check the price"),
            ProposedAction("place_order", ORDER, "the goal asks for it"),
        ]
    ),
    Plan(final_answer="Bought 10 ACME."),
)


class QuoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    symbol: str


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    symbol: str
    side: Literal["buy", "sell"]
    quantity: int


Effect = Callable[[str], Any]
"""The WRITE's side effect, given the idempotency key (or thread id); None for a no-op."""


def tools(effect: Effect | None = None) -> list[Tool]:
    """``get_quote`` (READ) and ``place_order`` (WRITE), no-ops unless given an effect."""

    def get_quote(args: QuoteArgs, call: ToolCall) -> dict[str, Any]:
        return {"symbol": args.symbol, "price": 101.5}

    def place_order(args: OrderArgs, call: ToolCall) -> dict[str, Any]:
        if effect is not None:
            effect(call.idempotency_key)
        return {"order_id": call.idempotency_key[:12], "symbol": args.symbol, "filled": args.quantity}

    return [
        Tool("get_quote", SideEffect.READ, QuoteArgs, get_quote, "Price of a symbol."),
        Tool("place_order", SideEffect.WRITE, OrderArgs, place_order, "Place an order."),
    ]


def keelgate_loop(
    *,
    checkpoints: CheckpointStore,
    idempotency: IdempotencyStore,
    audit: AuditLog,
    effect: Effect | None = None,
    lease_seconds: float = 300.0,
) -> Loop:
    """The step's loop over the given stores, with the scripted planner."""
    gateway = Gateway(
        tools(effect),
        grants=Grants({AGENT: ["*"]}),
        idempotency=idempotency,
        audit=audit,
        lease_seconds=lease_seconds,
    )
    return Loop(
        planner=ScriptedPlanner(SCRIPT, input_estimate=1),
        gateway=gateway,
        checkpoints=checkpoints,
        stop=StopConditions(max_iterations=5),
    )


def sqlite_connections(store: object) -> list[tuple[str, sqlite3.Connection]]:
    """Every sqlite3 connection a store holds (through its database, or as an attribute)."""
    db = getattr(store, "commit_group", None)
    if isinstance(db, SqliteDatabase):
        return [("conn", db.conn)]
    out = []
    for name, value in vars(store).items():
        conn = getattr(value, "_conn", value) if not isinstance(value, sqlite3.Connection) else value
        if isinstance(conn, sqlite3.Connection):
            out.append((name, conn))
    return out


class SqliteKeelgate:
    """Keelgate's SQLite stores in one folder.

    ``one_file=True`` (the recommended wiring, :class:`keelgate.sqlite.SqliteStores`):
    all three stores in one file, so the loop groups their commits. ``False``: three
    files as ``tests/conftest.py`` also wires them, every write committing alone (the
    figure before commit grouping).
    """

    def __init__(
        self,
        root: Path,
        *,
        effect: Effect | None = None,
        lease_seconds: float = 300.0,
        prewarm: bool = True,
        one_file: bool = True,
    ) -> None:
        if one_file:
            paths = [root / "keelgate.sqlite3"]
            self._holders = [prewarm_sqlite(p) for p in paths] if prewarm else []
            stores = SqliteStores(paths[0])
            self.checkpoints, self.keys, self.audit = stores.checkpoints, stores.idempotency, stores.audit
        else:
            paths = [root / "checkpoints.sqlite3", root / "keys.sqlite3", root / "audit.sqlite3"]
            self._holders = [prewarm_sqlite(p) for p in paths] if prewarm else []
            self.checkpoints = SqliteCheckpointStore(paths[0])
            self.keys = SqliteIdempotencyStore(paths[1])
            self.audit = SqliteAuditLog(paths[2])
        self.loop = keelgate_loop(
            checkpoints=self.checkpoints,
            idempotency=self.keys,
            audit=self.audit,
            effect=effect,
            lease_seconds=lease_seconds,
        )

    def connections(self) -> dict[str, sqlite3.Connection]:
        """The stores' distinct connections (for counting commits), found by type, not by name."""
        found: dict[str, sqlite3.Connection] = {}
        for label, store in (
            ("checkpoint", self.checkpoints),
            ("idempotency", self.keys),
            ("audit", self.audit),
        ):
            for name, conn in sqlite_connections(store):
                if all(conn is not c for c in found.values()):
                    found[label if name in ("_conn", "conn") else f"{label}.{name}"] = conn
        if len(found) == 1:
            return {"one file": next(iter(found.values()))}
        return found

    def close(self) -> None:
        for store in (self.checkpoints, self.keys, self.audit):
            store.close()
        for holder in self._holders:
            holder.close()


async def run_step(loop: Loop, run_id: str | None = None) -> Any:
    """One complete step as a new run; raises unless it reached its goal."""
    result = await loop.run(
        goal=GOAL, tenant_id=TENANT, agent_id=AGENT, as_of=AS_OF, run_id=run_id or uuid.uuid4().hex
    )
    if not result.goal_reached:
        raise RuntimeError(f"the step stopped with {result.stop_reason}")
    return result


# -- LangGraph ------------------------------------------------------------------------


class StepState(TypedDict, total=False):
    goal: str
    plan: list[dict[str, Any]]
    quote: dict[str, Any]
    order: dict[str, Any]
    answer: str
    verdict: str


def langgraph_graph(checkpointer: Any, effect: Callable[[str], Any] | None = None) -> Any:
    """plan -> read -> write -> verify, compiled with ``checkpointer``."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import END, START, StateGraph

    def plan(state: StepState) -> StepState:
        return {
            "plan": [
                {"tool": "get_quote", "arguments": {"symbol": "ACME"}},
                {"tool": "place_order", "arguments": ORDER},
            ]
        }

    def read(state: StepState) -> StepState:
        return {"quote": {"symbol": "ACME", "price": 101.5}}

    def write(state: StepState, config: RunnableConfig) -> StepState:
        thread = config["configurable"]["thread_id"]
        if effect is not None:
            effect(thread)
        return {"order": {"order_id": thread[:12], "symbol": "ACME", "filled": 10}}

    def verify(state: StepState) -> StepState:
        return {"answer": "Bought 10 ACME.", "verdict": "accept"}

    builder = StateGraph(StepState)
    builder.add_node("plan", plan)
    builder.add_node("read", read)
    builder.add_node("write", write)
    builder.add_node("verify", verify)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "read")
    builder.add_edge("read", "write")
    builder.add_edge("write", "verify")
    builder.add_edge("verify", END)
    return builder.compile(checkpointer=checkpointer)


def langgraph_step(graph: Any, thread_id: str | None = None) -> Any:
    """One step on a new thread, every checkpoint written before the next node (``sync``)."""
    config = {"configurable": {"thread_id": thread_id or uuid.uuid4().hex}}
    out = graph.invoke({"goal": GOAL}, config, durability="sync")
    if out.get("verdict") != "accept":
        raise RuntimeError("the graph did not finish")
    return out


class SqliteLangGraph:
    """LangGraph's ``SqliteSaver`` on a file in the same folder (WAL, as its setup makes it)."""

    def __init__(
        self, root: Path, *, effect: Callable[[str], Any] | None = None, prewarm: bool = True
    ) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = root / "langgraph.sqlite3"
        self._holders = [prewarm_sqlite(path)] if prewarm else []
        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.graph = langgraph_graph(self.saver, effect)

    def close(self) -> None:
        self.conn.close()
        for holder in self._holders:
            holder.close()
