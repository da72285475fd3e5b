"""Traces of runs: one trace per run through approvals, decisions and unknown outcomes; off, nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from keelgate.errors import CrashFailpoint
from keelgate.gateway import RequireApproval
from keelgate.loop import StopReason
from keelgate.tracing import SPAN_NAMES, otel_trace_id, run_context
from tests.conftest import act, answer, buy, quote

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans():
    """Every span ended during the test (the process's SDK provider, installed once)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_keelgate_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._keelgate_test_exporter = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _mine(exporter, run_id="run-1"):
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("keelgate.run_id") == run_id]


async def test_an_approved_run_is_one_trace_across_its_resume(world, spans):
    """Start, a person's approval and the resume share the run's trace id and its one root."""
    w = world([act(quote(), buy()), answer("bought")], policy=RequireApproval(["place_order"]))
    first = await w.start(w.loop())
    assert first.stop_reason is StopReason.APPROVAL_PENDING
    loop = w.loop()
    loop.approve("t1", "run-1", "1-2", by="alice")
    done = await w.start(loop)
    assert done.goal_reached
    got = _mine(spans)
    assert {s.context.trace_id for s in got} == {otel_trace_id(done.state.trace_id)}
    names = [s.name for s in got]
    assert names.count("keelgate.run") == 2 and "keelgate.verify" in names and "keelgate.plan" in names
    assert set(names) <= set(SPAN_NAMES)
    runs = [s for s in got if s.name == "keelgate.run"]
    assert [r.attributes["keelgate.stop_reason"] for r in runs] == ["approval_pending", "goal_reached"]
    assert len({r.parent.span_id for r in runs}) == 1 and all(r.parent.is_remote for r in runs)
    (decision,) = [s for s in got if s.name == "keelgate.decision"]
    assert decision.attributes["keelgate.decision"] == "approve"
    assert decision.attributes["keelgate.actor"] == "alice"
    assert decision.parent.span_id == runs[0].parent.span_id
    calls = [s for s in got if s.name == "keelgate.tool_call"]
    order = [c for c in calls if c.attributes["keelgate.tool"] == "place_order"]
    assert [c.attributes["keelgate.status"] for c in order] == ["awaiting_approval", "done"]
    assert order[1].attributes["keelgate.idempotency_key"] == done.state.actions[1].idempotency_key
    assert order[1].attributes["keelgate.side_effect"] == "write"
    assert all(c.parent.span_id in {r.context.span_id for r in runs} for c in calls)
    for span in got:  # no argument, output or goal in any attribute
        text = " ".join(str(v) for v in (span.attributes or {}).values())
        assert "ACME" not in text and "101.5" not in text and "buy 10" not in text


async def test_an_unknown_outcome_has_a_wait_span_from_its_claim_to_its_settlement(world, spans):
    """The wait starts when the call claimed its key and ends at the person's reconcile."""
    w = world([act(buy()), answer("done")])
    loop = w.loop()
    assert w.ledger is not None
    w.ledger.crash = ("after", 1, "raise")  # the tool dies after the order reached the ledger
    with pytest.raises(CrashFailpoint):
        await w.start(loop)
    loop = w.loop()
    first = await w.start(loop)
    assert first.stop_reason is StopReason.OUTCOME_UNKNOWN
    w.clock.advance(600)  # past the dead call's lease, so a person may settle it
    await loop.reconcile("t1", "run-1", "1-1", executed=True, by="bob", note="found in the ledger")
    (wait,) = [s for s in _mine(spans) if s.name == "keelgate.unknown_outcome.wait"]
    assert wait.attributes["keelgate.verdict"] == "executed"
    assert wait.attributes["keelgate.source"] == "human"
    assert (wait.end_time - wait.start_time) / 1e9 >= 600
    assert "found in the ledger" not in " ".join(str(v) for v in wait.attributes.values())


def test_run_context_is_the_same_root_in_every_process():
    """The root context depends only on the trace id and the run id."""
    a = trace.get_current_span(run_context("ab" * 16, "r1")).get_span_context()
    b = trace.get_current_span(run_context("ab" * 16, "r1")).get_span_context()
    assert a == b and a.trace_id == int("ab" * 16, 16) and a.is_remote
    assert otel_trace_id("not-hex") == otel_trace_id("not-hex") != 0


_RUN_ONE = """
import asyncio, tempfile
from datetime import UTC, datetime
from keelgate.audit import InMemoryAuditLog
from keelgate.checkpoint import InMemoryCheckpointStore
from keelgate.gateway import Gateway, Grants
from keelgate.idempotency import InMemoryIdempotencyStore
from keelgate.loop import Loop, Plan, ProposedAction, StopConditions
from keelgate.testing import Ledger, ScriptedPlanner, trading_tools
import keelgate.tracing as tracing

ledger = Ledger(tempfile.mktemp(suffix=".sqlite3"))
script = [Plan(actions=[ProposedAction("get_quote", {"symbol": "ACME"})]), Plan(final_answer="ok")]
audit = InMemoryAuditLog()
keys = InMemoryIdempotencyStore()
gateway = Gateway(trading_tools(ledger), grants=Grants({"a": ["*"]}), idempotency=keys, audit=audit)
loop = Loop(planner=ScriptedPlanner(script), gateway=gateway, checkpoints=InMemoryCheckpointStore(),
            stop=StopConditions(max_iterations=5))
result = asyncio.run(loop.run(goal="g", tenant_id="t", agent_id="a", as_of=datetime(2026, 1, 1, tzinfo=UTC)))
assert result.goal_reached, result.stop_reason
assert tracing._tracer() is None
print("ok")
"""


@pytest.mark.parametrize("blocked", [True, False], ids=["without-opentelemetry", "api-without-sdk"])
def test_a_run_needs_no_tracing(blocked):
    """With the API absent, or present without an SDK, a run completes and nothing is traced."""
    code = ("import sys; sys.modules['opentelemetry'] = None\n" if blocked else "") + textwrap.dedent(
        _RUN_ONE
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
