"""Test doubles for testing agents built on Keelgate.

A scripted planner that always answers the same for the same step (so a restarted
process plans exactly what the dead one did), a downstream ledger in its own SQLite
file that counts every execution (so a duplicate WRITE cannot hide), trading tools over
it, and a frozen clock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from keelgate._types import SideEffect
from keelgate.canonical import canonical_json
from keelgate.errors import CrashFailpoint, PlannerError
from keelgate.gateway import Tool, ToolCall
from keelgate.loop._planner import Plan, PlanRequest

__all__ = [
    "FrozenClock",
    "Ledger",
    "Quote",
    "ScriptedPlanner",
    "TradeOrder",
    "trading_tools",
]


class ScriptedPlanner:
    """Answers step ``n`` with ``script[n - 1]`` (a Plan, or a function of the request).

    ``calls`` counts planning calls, so a test can prove a resume did not re-plan.
    """

    def __init__(
        self,
        script: Sequence[Plan | Callable[[PlanRequest], Plan]],
        *,
        input_estimate: int | None = None,
    ) -> None:
        self.script = list(script)
        self.input_estimate = input_estimate
        self.calls = 0
        self.requests: list[PlanRequest] = []

    def estimate_tokens(self, request: PlanRequest) -> int:
        """The fixed ``input_estimate`` if given, else the request's own estimate."""
        if self.input_estimate is not None:
            return self.input_estimate
        return request.estimated_input_tokens()

    def plan(self, request: PlanRequest) -> Plan:
        """The scripted plan for ``request.iteration``."""
        self.calls += 1
        self.requests.append(request)
        if request.iteration > len(self.script):
            raise PlannerError(f"no scripted step {request.iteration}")
        step = self.script[request.iteration - 1]
        return step(request) if callable(step) else step


class FrozenClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        """The frozen wall time."""
        return self._now

    def monotonic(self) -> float:
        """The frozen monotonic reading."""
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both readings forward."""
        self._now += timedelta(seconds=seconds)
        self._mono += seconds


CrashMode = Literal["raise", "exit"]


class Ledger:
    """A downstream system of record in its own SQLite file.

    Every execution is a committed row: it does not deduplicate, so if Keelgate ever
    ran a WRITE twice the count would show it. ``crash`` makes the next executions die
    mid-call, before or after the row is committed, to manufacture unknown outcomes.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS executions (id INTEGER PRIMARY KEY, key TEXT, tool TEXT,"
            " arguments TEXT)"
        )
        self.crash: tuple[Literal["before", "after"], int, CrashMode] | None = None
        self._calls = 0

    def execute(self, key: str, tool: str, arguments: dict[str, Any]) -> int:
        """Record one execution and return its id."""
        self._calls += 1
        self._maybe_crash("before")
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO executions (key, tool, arguments) VALUES (?, ?, ?)",
                (key, tool, canonical_json(arguments)),
            )
        self._maybe_crash("after")
        return int(cur.lastrowid or 0)

    def _maybe_crash(self, where: str) -> None:
        if self.crash and self.crash[0] == where and self.crash[1] == self._calls:
            if self.crash[2] == "exit":
                os._exit(137)
            raise CrashFailpoint(f"tool_{where}_commit", self._calls)

    def count(self, key: str | None = None) -> int:
        """Executions, of one key or of all."""
        with self._lock:
            if key is None:
                row = self._db.execute("SELECT COUNT(*) FROM executions").fetchone()
            else:
                row = self._db.execute("SELECT COUNT(*) FROM executions WHERE key = ?", (key,)).fetchone()
        return int(row[0])

    def by_key(self) -> dict[str, int]:
        """Executions per idempotency key."""
        with self._lock:
            rows = self._db.execute("SELECT key, COUNT(*) FROM executions GROUP BY key").fetchall()
        return {str(k): int(n) for k, n in rows}

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


class Quote(BaseModel):
    """Arguments of ``get_quote``."""

    model_config = ConfigDict(extra="forbid")
    symbol: str = Field(min_length=1, max_length=12)


class TradeOrder(BaseModel):
    """Arguments of ``place_order``."""

    model_config = ConfigDict(extra="forbid")
    symbol: str = Field(min_length=1, max_length=12)
    side: Literal["buy", "sell"]
    quantity: int = Field(gt=0, le=1_000_000)


def trading_tools(ledger: Ledger, *, prices: dict[str, float] | None = None) -> list[Tool]:
    """``get_quote`` (READ) and ``place_order`` (WRITE, recorded in ``ledger``)."""
    table = prices or {"ACME": 101.5, "BETA": 42.0}

    def get_quote(args: Quote, call: ToolCall) -> dict[str, Any]:
        return {"symbol": args.symbol, "price": table.get(args.symbol, 10.0)}

    def place_order(args: TradeOrder, call: ToolCall) -> dict[str, Any]:
        order_id = ledger.execute(call.idempotency_key, "place_order", args.model_dump())
        return {"order_id": order_id, "symbol": args.symbol, "side": args.side, "filled": args.quantity}

    return [
        Tool("get_quote", SideEffect.READ, Quote, get_quote, "Latest price of a symbol."),
        Tool("place_order", SideEffect.WRITE, TradeOrder, place_order, "Place a market order."),
    ]
