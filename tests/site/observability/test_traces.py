"""The site's tracer: a run driven by the worker and decided in the console is one trace, its Run.trace_id."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from approvals.models import Approval
from approvals.services import approval_decide
from keelgate.tracing import otel_trace_id
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_start


def test_worker_drives_and_a_console_decision_share_the_runs_trace(operator, brokerage_path):
    """Both drives and the approval carry the trace id stored on the Run row; no argument is an attribute."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)  # installed by KeelgateSiteConfig.ready
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        run_start(tenant_id="t1", agent="paper-trader", goal="buy 3 ACME", user=operator, run_id="traced")
        worker = Worker(lease_seconds=30)
        assert worker.run_once()
        approval = Approval.objects.get(tenant_id="t1", run_id="traced")
        approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="ok")
        while worker.run_once():
            pass
        worker.close()
        run = Run.objects.get(tenant_id="t1", run_id="traced")
        assert run.status == RunStatus.DONE and run.trace_id
        spans = [s for s in exporter.get_finished_spans() if s.attributes.get("keelgate.run_id") == "traced"]
    finally:
        exporter.shutdown()
    assert {s.context.trace_id for s in spans} == {otel_trace_id(run.trace_id)}
    names = [s.name for s in spans]
    assert names.count("keelgate.run") == 2
    (decision,) = [s for s in spans if s.name == "keelgate.decision"]
    assert decision.attributes["keelgate.decision"] == "approve"
    assert decision.attributes["keelgate.actor"] == "op"
    order = [
        s for s in spans if s.name == "keelgate.tool_call" and s.attributes["keelgate.tool"] == "place_order"
    ]
    assert [s.attributes["keelgate.status"] for s in order] == ["awaiting_approval", "done"]
    for span in spans:
        assert "ACME" not in " ".join(str(v) for v in span.attributes.values())
