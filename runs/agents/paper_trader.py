"""The demo agent ``paper-trader``: reads "buy 10 ACME", quotes, then places the order.

Its planner is deterministic, so every run is reproducible; the order is a WRITE that
needs a person's approval within 4 hours, then an admin's within one more.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from keelgate.errors import PlannerError
from keelgate.gateway import RequireApproval, SideEffect, Tool, ToolCall
from keelgate.loop import GroundedAnswerVerifier, Plan, PlanRequest, ProposedAction, StopConditions
from runs.agents import Agent
from runs.agents.brokerage import PaperBrokerage
from sitekit.errors import GoalNotUnderstoodError

GOAL = re.compile(r"^\s*(buy|sell)\s+(\d{1,6})\s+([A-Za-z]{1,8})\s*$", re.IGNORECASE)


class QuoteArgs(BaseModel):
    """Arguments of ``get_quote``."""

    model_config = ConfigDict(extra="forbid")
    symbol: str = Field(pattern=r"^[A-Z]{1,8}$")


class OrderArgs(BaseModel):
    """Arguments of ``place_order``."""

    model_config = ConfigDict(extra="forbid")
    symbol: str = Field(pattern=r"^[A-Z]{1,8}$")
    side: Literal["buy", "sell"]
    quantity: int = Field(gt=0, le=1_000_000)


def read_goal(goal: str) -> tuple[str, int, str]:
    """(side, quantity, SYMBOL) from a goal, or GoalNotUnderstoodError."""
    match = GOAL.match(goal)
    if match is None or int(match.group(2)) == 0:
        raise GoalNotUnderstoodError("expected a goal like 'buy 10 ACME'")
    return match.group(1).lower(), int(match.group(2)), match.group(3).upper()


def validate_goal(goal: str) -> None:
    """Refuse, before a run is queued, a goal the planner could not read."""
    read_goal(goal)


class PaperTraderPlanner:
    """Step 1: quote and order. Step 2: report what happened to the order."""

    def plan(self, request: PlanRequest) -> Plan:
        """The deterministic plan for this step."""
        try:
            side, quantity, symbol = read_goal(request.goal)
        except GoalNotUnderstoodError as exc:
            raise PlannerError("goal_not_understood") from exc
        if request.iteration == 1:
            return Plan(
                actions=[
                    ProposedAction("get_quote", {"symbol": symbol}, "check the price first"),
                    ProposedAction(
                        "place_order",
                        {"symbol": symbol, "side": side, "quantity": quantity},
                        f"{side} {quantity} {symbol} as the goal asks",
                    ),
                ]
            )
        return Plan(final_answer=report(_last_outcome(request, "place_order"), side, quantity, symbol))


def report(order: dict[str, Any] | None, side: str, quantity: int, symbol: str) -> str:
    """What happened to the order, truthfully: filled, settled by a person, or not placed.

    A person who reconciled an unknown outcome as executed may have recorded the
    brokerage's result (then it is reported like a fill) or not (then the answer says
    the order went through and its result was not recorded: never "not placed").
    """
    verb = "Bought" if side == "buy" else "Sold"
    if not order or order.get("status") != "done":
        return f"The order to {side} {quantity} {symbol} was not placed."
    try:
        filled = json.loads(order["output"]) if order.get("output") else {}
    except ValueError:
        filled = {}
    filled = filled if isinstance(filled, dict) else {}
    # What was actually filled, not what the goal asked: a person may have edited the order.
    if isinstance(filled.get("quantity"), int) and not isinstance(filled.get("quantity"), bool):
        quantity = filled["quantity"]
    if isinstance(filled.get("symbol"), str):
        symbol = filled["symbol"]
    if filled.get("side") in ("buy", "sell"):
        verb = "Bought" if filled["side"] == "buy" else "Sold"
    details = []
    if filled.get("price") is not None:
        details.append(f"at {filled['price']}")
    if isinstance(filled.get("order_id"), str):
        details.append(f"(order {filled['order_id']})")
    if order.get("settled_by") and not filled:
        who = order["settled_by"]
        return (
            f"{verb} {quantity} {symbol}: {who} confirmed the order went through;"
            " its result was not recorded."
        )
    if order.get("settled_by"):
        details.append(f"as recorded by {order['settled_by']}")
    return " ".join([f"{verb} {quantity} {symbol}", *details]).rstrip() + "."


def _last_outcome(request: PlanRequest, tool: str) -> dict[str, Any] | None:
    for message in reversed(request.messages):
        if message.role == "tool":
            data = json.loads(message.content)
            if data.get("tool") == tool:
                return dict(data)
    return None


HIGH_IMPACT_USD = 10_000.0
"""An order whose notional (at the brokerage's own price) is above this is high impact."""


def describe_order(arguments: OrderArgs, observations: Sequence[str]) -> str:
    """ "buy 10 ACME ≈ 1,015.00 USD at the last quote 101.50", from this step's quote (untrusted)."""
    price = None
    for text in observations:
        try:
            seen = json.loads(text)
        except ValueError:
            continue
        if isinstance(seen, dict) and seen.get("symbol") == arguments.symbol:
            value = seen.get("price")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                price = float(value)
    what = f"{arguments.side} {arguments.quantity:,} {arguments.symbol}"
    if price is None:
        return f"{what} (no quote seen this step)"
    return f"{what} ≈ {arguments.quantity * price:,.2f} USD at the last quote {price:,.2f}"


def _ledger_record(brokerage: PaperBrokerage, key: str) -> dict[str, Any] | None:
    """The brokerage's record of the order with this key (it records before it answers)."""
    entry = brokerage.entry(key)
    return None if entry is None else dict(entry.result)


def build_agent() -> Agent:
    """The paper-trader agent over the configured paper brokerage."""
    brokerage = PaperBrokerage()

    def high_impact(arguments: Any) -> bool:
        # The brokerage's own price (trusted harness code), never the quote tool's output.
        try:
            price = brokerage.quote(arguments.symbol)
        except Exception:  # an unknown symbol: treat as high impact rather than guess low
            return True
        return bool(arguments.quantity * price > HIGH_IMPACT_USD)

    def get_quote(args: QuoteArgs, call: ToolCall) -> dict[str, Any]:
        return {"symbol": args.symbol, "price": brokerage.quote(args.symbol)}

    def place_order(args: OrderArgs, call: ToolCall) -> dict[str, Any]:
        return brokerage.place_order(call.idempotency_key, args.symbol, args.side, args.quantity)

    return Agent(
        name="paper-trader",
        planner=PaperTraderPlanner(),
        tools=[
            Tool("get_quote", SideEffect.READ, QuoteArgs, get_quote, "The paper price of a symbol."),
            Tool(
                "place_order",
                SideEffect.WRITE,
                OrderArgs,
                place_order,
                "Place a paper market order.",
                timeout=10.0,
                describe=describe_order,
            ),
        ],
        grants=["get_quote", "place_order"],
        policy=RequireApproval(
            ["place_order"],
            reason="Orders move money: a person must approve.",
            high_impact=high_impact,
            # An order nobody decides in 4 hours goes to an admin for one more hour, then
            # is denied; each deadline is announced 30 minutes ahead (approval.expiring).
            expires_after=timedelta(hours=4),
            on_expiry="escalate",
            escalate_to="admin",
            escalate_after=timedelta(hours=1),
            warn_before=timedelta(minutes=30),
        ),
        verifier=GroundedAnswerVerifier(write_tools=["place_order"]),
        stop=StopConditions(max_iterations=5),
        validate_goal=validate_goal,
        lookups={"place_order": lambda key, arguments: _ledger_record(brokerage, key)},
        lookup_label="the brokerage",
        done_words={"place_order": "order filled"},
    )
