"""The site's provider: while only the histograms take spans, the engine's spans are timed, not recorded."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from keelgate.tracing import TRACER_NAME, otel_trace_id, run_context
from keelgate_site.tracing import LatencyMetrics, TimingTracerProvider
from sitekit.logs import bound

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def observed(monkeypatch):
    """Every histogram observation: (span name, attributes, seconds)."""
    seen: list[tuple[str, dict, float]] = []
    monkeypatch.setattr(LatencyMetrics, "observe", staticmethod(lambda n, a, s: seen.append((n, dict(a), s))))
    return seen


@pytest.fixture
def provider():
    provider = TimingTracerProvider()
    provider.add_span_processor(LatencyMetrics())  # as configure_tracing adds it
    yield provider
    provider.shutdown()


def _tool_call(tracer, *, fail: bool = False) -> tuple[trace.Span, str, int]:
    """A tool-call span as the engine opens it; what the current span and the log ids were inside."""
    with tracer.start_as_current_span(
        "keelgate.tool_call", context=run_context(TRACE, "r1"), attributes={"keelgate.tool": "place_order"}
    ) as span:
        span.set_attribute("keelgate.status", "done")
        inside = trace.get_current_span()
        logged = bound().get("trace", "")
        if fail:
            raise RuntimeError("the tool broke")
    return inside, logged, span.get_span_context().span_id


def test_a_span_is_timed_into_its_histogram_and_carries_the_runs_trace(provider, observed):
    tracer = provider.get_tracer(TRACER_NAME)
    inside, logged, span_id = _tool_call(tracer)
    assert not provider.recording
    assert not isinstance(inside, ReadableSpan)  # no SDK span was made
    assert inside.get_span_context().trace_id == otel_trace_id(TRACE)
    assert logged == TRACE  # log lines inside the span name the run's trace
    root = trace.get_current_span(run_context(TRACE, "r1")).get_span_context().span_id
    assert span_id not in (root, 0)  # a child of the run's root
    [(name, attributes, seconds)] = observed
    assert name == "keelgate.tool_call"
    assert attributes == {"keelgate.tool": "place_order", "keelgate.status": "done"}
    assert seconds > 0
    assert trace.get_current_span() is trace.INVALID_SPAN  # the span is current only inside


def test_a_failing_block_still_ends_its_span_and_a_span_is_observed_once(provider, observed):
    tracer = provider.get_tracer(TRACER_NAME)
    with pytest.raises(RuntimeError, match="the tool broke"):
        _tool_call(tracer, fail=True)
    assert [name for name, _, _ in observed] == ["keelgate.tool_call"]
    with tracer.start_as_current_span("keelgate.plan") as span:
        pass
    span.end()  # ended again by hand, as the API allows
    assert [name for name, _, _ in observed] == ["keelgate.tool_call", "keelgate.plan"]


def test_another_libraries_spans_are_not_observed(provider, observed):
    with provider.get_tracer("someone.else").start_as_current_span("keelgate.plan"):
        pass
    assert observed == []


def test_once_a_processor_takes_spans_new_ones_are_the_sdks_and_still_timed(provider, observed):
    exporter = InMemorySpanExporter()
    tracer = provider.get_tracer(TRACER_NAME)  # taken before: it follows the provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert provider.recording
    inside, logged, _ = _tool_call(tracer)
    assert isinstance(inside, ReadableSpan)
    [span] = exporter.get_finished_spans()
    assert span.context.trace_id == otel_trace_id(TRACE) and logged == TRACE
    assert span.attributes["keelgate.status"] == "done"
    [(name, attributes, _)] = observed  # by LatencyMetrics.on_end now
    assert name == "keelgate.tool_call" and attributes["keelgate.status"] == "done"
