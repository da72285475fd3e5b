"""GatedToolNode: every LangGraph tool call through the Gateway, once, and never unapproved."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict

from keelgate.contrib.langgraph import GatedToolNode, KeelgateSaver
from keelgate.contrib.langgraph.testing import buy, order_graph
from keelgate.errors import CrashFailpoint
from keelgate.gateway import Gateway, Grants, RequireApproval, SideEffect, Tool
from keelgate.idempotency import KeyStatus, derive_key
from keelgate.sqlite import SqliteStores
from keelgate.testing import Ledger, trading_tools

TENANT, THREAD = "acme", "run-1"
CONFIG: Any = {"configurable": {"thread_id": THREAD}}


class Nothing(BaseModel):
    model_config = ConfigDict(extra="forbid")


def broken(args: Nothing, call: Any) -> None:
    raise RuntimeError("downstream exploded")


class World:
    """Stores, ledger and saver in one temp dir; ``graph(script)`` compiles a fresh graph (a restart)."""

    def __init__(self, tmp_path, *, policy=None) -> None:
        self.stores = SqliteStores(tmp_path / "kg.sqlite3")
        self.ledger = Ledger(tmp_path / "ledger.sqlite3")
        self.saver = KeelgateSaver.sqlite(self.stores.database, tenant_id=TENANT)
        tools = [
            *trading_tools(self.ledger),
            Tool("broken_read", SideEffect.READ, Nothing, broken),
            Tool("broken_write", SideEffect.WRITE, Nothing, broken),
        ]
        self.gateway = Gateway(
            tools,
            grants=Grants({"trader": ["*"]}),
            idempotency=self.stores.idempotency,
            audit=self.stores.audit,
            policy=policy,
        )

    def graph(self, script, saver=None):  # type: ignore[no-untyped-def]
        node = GatedToolNode(self.gateway, agent_id="trader", tenant_id=TENANT)
        return order_graph(node, script).compile(checkpointer=saver or self.saver)

    def start(self, script) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return self.graph(script).invoke({"messages": [HumanMessage("trade")]}, CONFIG)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.stores.audit.events(TENANT)]


def tool_messages(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def key_of(symbol: str, quantity: int) -> str:
    return derive_key(TENANT, THREAD, "place_order", {"symbol": symbol, "side": "buy", "quantity": quantity})


def test_a_write_runs_once_with_the_engines_key(tmp_path):
    """The order runs once, under the key the engine would derive with the thread as the run."""
    w = World(tmp_path)
    out = w.start([[buy("ACME", 10)]])
    (msg,) = tool_messages(out)
    assert msg.status == "success" and '"filled":10' in str(msg.content)
    assert msg.artifact["keelgate"]["idempotency_key"] == key_of("ACME", 10)
    assert w.ledger.by_key() == {key_of("ACME", 10): 1}
    assert w.stores.idempotency.get(TENANT, key_of("ACME", 10)).status is KeyStatus.COMPLETED


def test_after_a_crash_a_completed_call_replays_and_an_in_flight_one_stops_for_a_person(tmp_path):
    """Die inside the second order: on resume the first replays, the second is an unknown outcome."""
    w = World(tmp_path)
    w.ledger.crash = ("before", 2, "raise")
    with pytest.raises(CrashFailpoint):
        w.start([[buy("ACME", 10), buy("BETA", 5)]])
    w.ledger.crash = None
    out = w.graph([[buy("ACME", 10), buy("BETA", 5)]]).invoke(None, CONFIG)  # a restarted process
    (stop,) = out["__interrupt__"]
    assert stop.value["kind"] == "unknown_outcome" and stop.value["idempotency_key"] == key_of("BETA", 5)
    assert w.ledger.by_key() == {key_of("ACME", 10): 1}
    out = w.graph([[buy("ACME", 10), buy("BETA", 5)]]).invoke(
        Command(resume={"decision": "not_executed", "by": "ops", "note": "not at the broker"}), CONFIG
    )
    first, second = tool_messages(out)
    assert first.status == "success" and first.artifact["keelgate"]["replayed"] is True
    assert second.status == "error" and second.artifact["keelgate"]["status"] == "abandoned"
    assert w.ledger.by_key() == {key_of("ACME", 10): 1}
    assert w.stores.idempotency.get(TENANT, key_of("BETA", 5)).status is KeyStatus.ABANDONED
    assert "loop.reconciled" in w.kinds()


def test_an_unknown_outcome_settled_as_executed_keeps_the_result(tmp_path):
    """Died after the downstream committed: a person says executed; the call is done and never re-run."""
    w = World(tmp_path)
    w.ledger.crash = ("after", 1, "raise")
    with pytest.raises(CrashFailpoint):
        w.start([[buy("ACME", 10)]])
    w.ledger.crash = None
    assert w.graph([[buy("ACME", 10)]]).invoke(None, CONFIG)["__interrupt__"]
    out = w.graph([[buy("ACME", 10)]]).invoke(
        Command(resume={"decision": "executed", "by": "ops", "result": {"order_id": 1}}), CONFIG
    )
    (msg,) = tool_messages(out)
    assert msg.status == "success" and msg.content == '{"order_id":1}'
    assert w.ledger.count() == 1
    record = w.stores.idempotency.get(TENANT, key_of("ACME", 10))
    assert record.status is KeyStatus.COMPLETED and record.settled_by == "ops"


def approving(tmp_path) -> World:
    return World(tmp_path, policy=RequireApproval(["place_order"]))


def test_a_call_that_needs_approval_interrupts_and_runs_once_approved(tmp_path):
    """The graph stops with the call's payload, audited once; approve resumes it and the order runs once."""
    w = approving(tmp_path)
    out = w.start([[buy("ACME", 10)]])
    (stop,) = out["__interrupt__"]
    assert stop.value["kind"] == "approval" and stop.value["arguments"]["quantity"] == 10
    assert w.ledger.count() == 0
    out = w.graph([[buy("ACME", 10)]]).invoke(Command(resume={"decision": "approve", "by": "alice"}), CONFIG)
    assert tool_messages(out)[0].status == "success"
    assert w.ledger.by_key() == {key_of("ACME", 10): 1}
    assert w.kinds().count("approval.requested") == 1


def test_deny_runs_nothing_and_tells_the_model(tmp_path):
    """A denial answers the model with approval_denied; the downstream saw nothing."""
    w = approving(tmp_path)
    w.start([[buy("ACME", 10)]])
    out = w.graph([[buy("ACME", 10)]]).invoke(
        Command(resume={"decision": "deny", "by": "bob", "note": "too big"}), CONFIG
    )
    (msg,) = tool_messages(out)
    assert msg.status == "error" and "approval_denied" in str(msg.content)
    assert w.ledger.count() == 0


def test_edit_then_approve_runs_the_edited_arguments_under_their_own_key(tmp_path):
    """Approving edited arguments runs those, keyed by them; an invalid edit asks again, running nothing."""
    w = approving(tmp_path)
    w.start([[buy("ACME", 10)]])
    out = w.graph([[buy("ACME", 10)]]).invoke(
        Command(resume={"decision": "approve", "by": "alice", "arguments": {"symbol": "ACME"}}), CONFIG
    )
    (stop,) = out["__interrupt__"]
    assert stop.value["error"] == "edited_arguments_invalid" and stop.value["detail"] == "quantity, side"
    assert w.ledger.count() == 0
    edited = {"symbol": "ACME", "side": "buy", "quantity": 3}
    out = w.graph([[buy("ACME", 10)]]).invoke(
        Command(resume={"decision": "approve", "by": "alice", "arguments": edited}), CONFIG
    )
    assert tool_messages(out)[0].status == "success"
    assert w.ledger.by_key() == {key_of("ACME", 3): 1}


def test_a_malformed_resume_is_answered_with_its_error_and_a_good_one_still_works(tmp_path):
    """A resume value that is not a decision stops the graph again with decision_invalid; nothing runs."""
    w = approving(tmp_path)
    w.start([[buy("ACME", 10)]])
    for bad in (
        {"decision": "maybe", "by": "x"},
        "yes",
        {"decision": "approve"},
        {"decision": "executed", "by": "x"},
    ):
        out = w.graph([[buy("ACME", 10)]]).invoke(Command(resume=bad), CONFIG)
        (stop,) = out["__interrupt__"]
        assert stop.value["error"] == "decision_invalid" and stop.value["kind"] == "approval"
    assert w.ledger.count() == 0
    out = w.graph([[buy("ACME", 10)]]).invoke(Command(resume={"decision": "approve", "by": "alice"}), CONFIG)
    assert tool_messages(out)[0].status == "success"
    assert w.ledger.count() == 1
    assert w.kinds().count("approval.requested") == 1


def test_bad_calls_are_answered_not_run(tmp_path):
    """Schema failure, unknown tool and a raising READ answer the model with their codes; nothing runs."""
    w = World(tmp_path)
    out = w.start(
        [
            [
                {"name": "place_order", "args": {"symbol": "ACME", "side": "hold", "quantity": -1}},
                {"name": "launch_rocket", "args": {}},
                {"name": "broken_read", "args": {}},
            ]
        ]
    )
    codes = [m.artifact["keelgate"]["code"] for m in tool_messages(out)]
    assert codes == ["invalid_arguments", "unknown_tool", "tool_failed"]
    assert all(m.status == "error" for m in tool_messages(out))
    assert w.ledger.count() == 0


def test_a_write_that_raises_is_an_unknown_outcome(tmp_path):
    """A WRITE tool raising may have acted: the graph stops for a person instead of retrying it."""
    w = World(tmp_path)
    out = w.start([[{"name": "broken_write", "args": {}}]])
    (stop,) = out["__interrupt__"]
    assert stop.value["kind"] == "unknown_outcome"
    again = w.graph([[{"name": "broken_write", "args": {}}]]).invoke(None, CONFIG)
    assert again["__interrupt__"][0].value["kind"] == "unknown_outcome"


def test_another_tenants_thread_is_a_fresh_empty_thread(tmp_path):
    """The same thread id under another tenant's saver has none of the first tenant's state or keys."""
    w = World(tmp_path)
    w.start([[buy("ACME", 10)]])
    other = w.saver.for_tenant("globex")
    graph = w.graph([[buy("ACME", 10)]], saver=other)
    assert graph.get_state(CONFIG).values == {}
    assert other.get_tuple(CONFIG) is None
