"""Requests and specs shared by the OpenAI tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from keelgate.gateway import SideEffect, ToolSpec
from keelgate.loop import ContextMessage, LLMPlanner, PlanRequest
from keelgate.testing import Quote, TradeOrder

AS_OF = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)

SPECS = [
    ToolSpec("get_quote", "Latest price of a symbol.", SideEffect.READ, Quote.model_json_schema()),
    ToolSpec("place_order", "Place a market order.", SideEffect.WRITE, TradeOrder.model_json_schema()),
]


def plan_request(
    messages: list[ContextMessage] | None = None, tools: list[ToolSpec] | None = None
) -> PlanRequest:
    """A first-step request for the trading goal."""
    return PlanRequest(
        tenant_id="t1",
        run_id="run-1",
        agent_id="trader",
        goal="buy 10 ACME",
        as_of=AS_OF,
        iteration=1,
        messages=messages if messages is not None else [ContextMessage("system", "Goal: buy 10 ACME")],
        tools=SPECS if tools is None else tools,
    )


def planner(url: str, **options: Any) -> LLMPlanner:
    """An LLMPlanner pointed at the local server."""
    return LLMPlanner(model="fake-model", base_url=url, api_key="test-key", **options)
