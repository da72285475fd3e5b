"""Test doubles for LangGraph agents under Keelgate: a scripted chat model and an order graph.

    graph = order_graph(GatedToolNode(gateway, agent_id="trader"), [[buy("ACME", 10)]])
    graph.compile(checkpointer=KeelgateSaver.sqlite(path)).invoke({"messages": [...]}, config)

The scripted model answers its ``n``-th turn with the ``n``-th list of tool calls (ids
``call-<n>-<i>``, the same on every run) and then with a final message, so a process
that restarts proposes exactly what the dead one did, as a real model's checkpointed
answer would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph

__all__ = ["ScriptedChatModel", "buy", "order_graph"]


def buy(symbol: str, quantity: int, side: str = "buy") -> dict[str, Any]:
    """One ``place_order`` tool call."""
    return {"name": "place_order", "args": {"symbol": symbol, "side": side, "quantity": quantity}}


class ScriptedChatModel:
    """A graph node standing in for a chat model: turn ``n`` asks for ``script[n - 1]``."""

    def __init__(self, script: Sequence[Sequence[Mapping[str, Any]]], *, final: str = "Done.") -> None:
        self.script = [list(turn) for turn in script]
        self.final = final
        self.calls = 0

    def __call__(self, state: MessagesState) -> dict[str, Any]:
        """The next scripted AI message (its turn is the count of AI messages so far)."""
        self.calls += 1
        turn = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        if turn >= len(self.script):
            return {"messages": [AIMessage(content=self.final)]}
        calls = [
            {"name": c["name"], "args": dict(c["args"]), "id": f"call-{turn + 1}-{i}", "type": "tool_call"}
            for i, c in enumerate(self.script[turn])
        ]
        return {"messages": [AIMessage(content="", tool_calls=calls)]}


def _route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def order_graph(
    tools: Callable[..., Any] | Any,
    script: Sequence[Sequence[Mapping[str, Any]]],
    *,
    model: Any = None,
) -> StateGraph[Any]:
    """model → tools → model … → end: the ReAct loop with any tools node (gated or not)."""
    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("model", model or ScriptedChatModel(script))
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", _route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder
