"""Shared fixtures: a trading agent wired over real SQLite files in a temporary folder."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from keelgate.audit import SqliteAuditLog
from keelgate.checkpoint import SqliteCheckpointStore
from keelgate.gateway import ApprovalPolicy, Gateway, Grants
from keelgate.idempotency import SqliteIdempotencyStore
from keelgate.loop import Loop, Plan, ProposedAction, StopConditions
from keelgate.sqlite import SqliteStores
from keelgate.testing import FrozenClock, Ledger, ScriptedPlanner, trading_tools

AS_OF = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)

STORES_ENV = "KEELGATE_TEST_STORES"
"""``one_file``: a :class:`World` (here and in child processes) puts its stores in one file."""
LAYOUTS = ("files", "one_file")
"""Three files, each store committing alone; or one file, the loop grouping commits."""


@pytest.fixture(params=LAYOUTS)
def store_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per store layout (child processes inherit it through the environment)."""
    monkeypatch.setenv(STORES_ENV, request.param)
    return str(request.param)


def buy(symbol: str = "ACME", quantity: int = 10, side: str = "buy") -> ProposedAction:
    """A place_order proposal."""
    return ProposedAction("place_order", {"symbol": symbol, "side": side, "quantity": quantity})


def quote(symbol: str = "ACME") -> ProposedAction:
    """A get_quote proposal."""
    return ProposedAction("get_quote", {"symbol": symbol})


def answer(text: str) -> Plan:
    """A final-answer plan."""
    return Plan(final_answer=text)


def act(*actions: ProposedAction, tokens: tuple[int, int] = (0, 0), model: str | None = None) -> Plan:
    """An actions plan with optional usage."""
    from keelgate.loop import ModelUsage

    return Plan(actions=actions, usage=ModelUsage(tokens[0], tokens[1], model))


@dataclass
class World:
    """Every durable file of one scenario; ``loop()`` rebuilds all objects over them."""

    root: Path
    script: Sequence[Plan | Callable[..., Plan]]
    clock: FrozenClock = field(default_factory=FrozenClock)
    policy: ApprovalPolicy | None = None
    input_estimate: int | None = 1
    planner: ScriptedPlanner | None = None
    ledger: Ledger | None = None
    audit: SqliteAuditLog | None = None
    checkpoints: SqliteCheckpointStore | None = None
    keys: SqliteIdempotencyStore | None = None
    one_file: bool = field(default_factory=lambda: os.environ.get(STORES_ENV) == "one_file")
    """All three stores in one file (``SqliteStores``), so the loop groups their commits."""

    def loop(self, **kwargs: Any) -> Loop:
        """A fresh process's view: new objects over the same files."""
        for thing in (self.ledger, self.audit, self.checkpoints, self.keys):
            if thing is not None:
                thing.close()
        self.ledger = Ledger(self.root / "ledger.sqlite3")
        if self.one_file:
            stores = SqliteStores(self.root / "keelgate.sqlite3", clock=self.clock)
            self.audit, self.checkpoints, self.keys = stores.audit, stores.checkpoints, stores.idempotency
        else:
            self.audit = SqliteAuditLog(self.root / "audit.sqlite3", clock=self.clock)
            self.checkpoints = SqliteCheckpointStore(self.root / "checkpoints.sqlite3")
            self.keys = SqliteIdempotencyStore(self.root / "keys.sqlite3")
        self.planner = ScriptedPlanner(self.script, input_estimate=self.input_estimate)
        gateway = Gateway(
            trading_tools(self.ledger),
            grants=Grants({"trader": ["*"]}),
            idempotency=self.keys,
            audit=self.audit,
            policy=self.policy,
            clock=self.clock,
        )
        kwargs.setdefault("stop", StopConditions(max_iterations=10))
        return Loop(
            planner=self.planner, gateway=gateway, checkpoints=self.checkpoints, clock=self.clock, **kwargs
        )

    async def start(self, loop: Loop, run_id: str = "run-1", **kwargs: Any) -> Any:
        """``run_or_resume`` with the scenario's identity."""
        return await loop.run_or_resume(
            goal="buy 10 ACME", tenant_id="t1", agent_id="trader", as_of=AS_OF, run_id=run_id, **kwargs
        )

    def close(self) -> None:
        """Close every handle."""
        for thing in (self.ledger, self.audit, self.checkpoints, self.keys):
            if thing is not None:
                thing.close()


@pytest.fixture
def world(tmp_path: Path, store_layout: str) -> Callable[..., World]:
    """Build a :class:`World` with a script in a temporary folder, once per store layout."""
    made: list[World] = []

    def make(script: Sequence[Any], **kwargs: Any) -> World:
        w = World(tmp_path, script, **kwargs)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
