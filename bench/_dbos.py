"""DBOS (``dbos`` 3.x) as a second baseline: the same five steps as one durable workflow.

plan, read (the quote), write (the order), observe and verify are five ``@DBOS.step``
functions called by one ``@DBOS.workflow``; DBOS checkpoints the workflow's start, each
step's output and its end in its system database (a SQLite file, or PostgreSQL), each in
its own commit. Tools are no-ops, as in the other systems. DBOS is one instance per
process: :class:`DbosStep` launches it on a database and :meth:`DbosStep.close` destroys
it, so benchmark 1 and 2 can each use their own.
"""

from __future__ import annotations

import uuid
from typing import Any

from bench._scenario import GOAL, ORDER

_registered: dict[str, Any] = {}


def _workflow() -> Any:
    """Define the steps and the workflow once (DBOS registers them globally)."""
    if "workflow" in _registered:
        return _registered["workflow"]
    from dbos import DBOS

    @DBOS.step()
    def plan(goal: str) -> list[dict[str, Any]]:
        return [
            {"tool": "get_quote", "arguments": {"symbol": "ACME"}},
            {"tool": "place_order", "arguments": ORDER},
        ]

    @DBOS.step()
    def read(symbol: str) -> dict[str, Any]:
        return {"symbol": symbol, "price": 101.5}

    @DBOS.step()
    def write(key: str) -> dict[str, Any]:
        return {"order_id": key[:12], "symbol": "ACME", "filled": 10}

    @DBOS.step()
    def observe(quote: dict[str, Any], order: dict[str, Any]) -> str:
        return f"bought {order['filled']} {quote['symbol']}"

    @DBOS.step()
    def verify(answer: str) -> str:
        return "accept"

    @DBOS.workflow()
    def step_workflow(goal: str) -> str:
        actions = plan(goal)
        quote = read(actions[0]["arguments"]["symbol"])
        order = write(DBOS.workflow_id or "")
        return verify(observe(quote, order))

    _registered["workflow"] = step_workflow
    return step_workflow


class DbosStep:
    """DBOS launched on ``url`` (``sqlite:///..`` or ``postgresql://..``) until :meth:`close`."""

    def __init__(self, url: str) -> None:
        from dbos import DBOS

        workflow = _workflow()
        DBOS(config={"name": "keelgate-bench", "system_database_url": url, "log_level": "WARNING"})
        DBOS.launch()
        self._workflow = workflow

    def step(self) -> None:
        """One step as a new workflow; raises unless it verified."""
        from dbos import SetWorkflowID

        with SetWorkflowID(uuid.uuid4().hex):
            verdict = self._workflow(GOAL)
        if verdict != "accept":
            raise RuntimeError("the DBOS workflow did not verify")

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()
