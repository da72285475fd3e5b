"""The demo LangGraph agent ``graph-trader``: the paper trader's tools, driven by a LangGraph graph.

A scripted chat model (deterministic, so a restarted worker proposes what the dead one
did) reads "buy 10 ACME", asks for a quote, then for the order, then reports; its tools
node is the ``GatedToolNode`` the worker gives it, so the order waits in the inbox for a
person and runs once. Needs the ``langgraph`` extra.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import MessagesState

from keelgate.contrib.langgraph.testing import order_graph
from keelgate.gateway import RequireApproval
from runs.agents import PLANNED_IN_GRAPH, Agent
from runs.agents.paper_trader import build_agent as paper_trader
from runs.agents.paper_trader import read_goal, validate_goal


def trader_model(state: MessagesState) -> dict[str, Any]:
    """Turn 1: quote; turn 2: order; then a report of what the order's tool answered."""
    messages = state["messages"]
    goal = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
    side, quantity, symbol = read_goal(goal)
    turn = sum(1 for m in messages if isinstance(m, AIMessage)) + 1
    if turn == 1:
        calls = [{"name": "get_quote", "args": {"symbol": symbol}, "id": "quote-1", "type": "tool_call"}]
        return {"messages": [AIMessage(content="", tool_calls=calls)]}
    if turn == 2:
        args = {"symbol": symbol, "side": side, "quantity": quantity}
        calls = [{"name": "place_order", "args": args, "id": "order-1", "type": "tool_call"}]
        return {"messages": [AIMessage(content="", tool_calls=calls)]}
    answer = next((m for m in reversed(messages) if isinstance(m, ToolMessage)), None)
    ok = answer is not None and answer.status == "success"
    words = f"{side} {quantity} {symbol}: " + ("placed." if ok else "not placed.")
    return {"messages": [AIMessage(content=words)]}


def build_graph(tools_node: Any) -> Any:
    """model → tools → model … → end, with the worker's gated tools node."""
    return order_graph(tools_node, [], model=trader_model)


def build_agent() -> Agent:
    """The graph trader over the configured paper brokerage."""
    base = paper_trader()
    return Agent(
        name="graph-trader",
        planner=PLANNED_IN_GRAPH,
        tools=base.tools,
        grants=list(base.grants),
        policy=RequireApproval(["place_order"], reason="Orders move money: a person must approve."),
        validate_goal=validate_goal,
        lookups=base.lookups,
        lookup_label=base.lookup_label,
        done_words=base.done_words,
        graph=build_graph,
    )
