"""The site's OpenTelemetry SDK: the engine's spans exported by OTLP, and timed for Prometheus.

Configured once per process (``KeelgateSiteConfig.ready``: Daphne, the worker, every
command) from the standard variables: ``OTEL_SDK_DISABLED``, ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_EXPORTER`` (``otlp``,
``console`` or ``none``) and ``OTEL_EXPORTER_OTLP_*`` (endpoint, headers, protocol
http/protobuf). Spans are exported only when asked: ``OTEL_TRACES_EXPORTER`` names
``otlp`` or an OTLP endpoint is set, so a laptop without a collector sends nothing.

The provider is installed either way, because the step and tool-call latency
histograms (``sitekit.metrics``) are timed from the engine's spans as they end: one
place measures both. While nothing but those histograms takes spans (no exporter, no
processor added by a host or a test), the site's provider makes *timed* spans
(:class:`TimingTracerProvider`): the current span, with the run's trace id for the log
lines, and a duration, but none of the SDK's recording: an SDK span costs a step a
noticeable share of its CPU (docs/performance.md#timing-spans), for data nobody would
read. Once a processor that exports is added, every new
span is an SDK span again. A sampler that drops spans (``OTEL_TRACES_SAMPLER=traceidratio``)
thins the histograms only then.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from keelgate.tracing import TRACER_NAME
from sitekit import metrics

_configured: TracerProvider | None = None


class LatencyMetrics(SpanProcessor):
    """Observes each ended engine span's duration in the step or tool-call histogram."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if scope is None or scope.name != TRACER_NAME or span.start_time is None or span.end_time is None:
            return
        self.observe(span.name, span.attributes or {}, (span.end_time - span.start_time) / 1e9)

    @staticmethod
    def observe(name: str, attributes: Mapping[str, Any], seconds: float) -> None:
        """One engine span's duration into its histogram (the others have none)."""
        if name == "keelgate.tool_call":
            metrics.TOOL_CALL_SECONDS.labels(
                str(attributes.get("keelgate.tool", "")),
                str(attributes.get("keelgate.side_effect", "")),
                str(attributes.get("keelgate.status", "error")),
            ).observe(seconds)
        elif name in ("keelgate.plan", "keelgate.verify", "keelgate.run"):
            metrics.STEP_SECONDS.labels(name.removeprefix("keelgate.")).observe(seconds)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class TimingTracerProvider(TracerProvider):
    """The SDK's provider, whose tracers only time a span until a processor other than
    :class:`LatencyMetrics` is added (:attr:`recording`)."""

    recording = False
    """Something besides the histograms takes spans: new ones are the SDK's."""

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        super().add_span_processor(span_processor)
        if not isinstance(span_processor, LatencyMetrics):
            self.recording = True

    def get_tracer(self, instrumenting_module_name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        sdk = super().get_tracer(instrumenting_module_name, *args, **kwargs)
        return _TimingTracer(self, sdk, instrumenting_module_name)


class _TimingTracer(trace.Tracer):
    """The SDK's tracer, or, while its provider records nothing, :class:`_TimedSpan` for the
    spans made current (the engine's run, phase and tool-call spans)."""

    def __init__(self, provider: TimingTracerProvider, sdk: trace.Tracer, scope: str) -> None:
        self._provider = provider
        self._sdk = sdk
        self._timed = scope == TRACER_NAME  # only the engine's spans have histograms

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._sdk.start_span(*args, **kwargs)

    @contextmanager
    def start_as_current_span(  # type: ignore[override]  # the API types it with a private decorator
        self,
        name: str,
        context: Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: Any = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        if self._provider.recording:
            with self._sdk.start_as_current_span(
                name,
                context=context,
                kind=kind,
                attributes=attributes,
                links=links,
                start_time=start_time,
                record_exception=record_exception,
                set_status_on_exception=set_status_on_exception,
                end_on_exit=end_on_exit,
            ) as span:
                yield span
            return
        timed = _TimedSpan(name, context, attributes, observe=self._timed)
        with trace.use_span(timed, end_on_exit=end_on_exit):
            yield timed


class _TimedSpan(trace.NonRecordingSpan):
    """A current span that only keeps its attributes and start, observed once when it ends.

    Its context is a child's of the parent's (the run's trace id, a new span id), so log
    lines written inside it carry the trace as they do inside an SDK span.
    """

    def __init__(self, name: str, context: Context | None, attributes: Any, *, observe: bool) -> None:
        parent = trace.get_current_span(context).get_span_context()
        valid = parent.is_valid
        super().__init__(
            trace.SpanContext(
                trace_id=parent.trace_id if valid else random.getrandbits(128) or 1,
                span_id=random.getrandbits(64) or 1,
                is_remote=False,
                trace_flags=parent.trace_flags if valid else trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
        )
        self._name = name
        self._attributes: dict[str, Any] = dict(attributes or {})
        self._observe = observe
        self._start: int | None = time.perf_counter_ns()

    def set_attribute(self, key: str, value: Any) -> None:
        self._attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._attributes.update(attributes)

    def end(self, end_time: int | None = None) -> None:
        start, self._start = self._start, None
        if start is not None and self._observe:
            LatencyMetrics.observe(self._name, self._attributes, (time.perf_counter_ns() - start) / 1e9)


def _exporters() -> list[str]:
    named = os.environ.get("OTEL_TRACES_EXPORTER", "")
    if named:
        return [n.strip() for n in named.split(",") if n.strip() and n.strip() != "none"]
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return ["otlp"] if endpoint else []


def configure_tracing() -> TracerProvider | None:
    """Install the SDK provider once (or join one already installed); None if the SDK is disabled."""
    global _configured
    if _configured is not None:
        return _configured
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        provider = current  # a host (a distro, a test) installed one first: add to it
    else:
        attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "keelgate"}
        provider = TimingTracerProvider(resource=Resource.create(attributes))
        trace.set_tracer_provider(provider)
    provider.add_span_processor(LatencyMetrics())
    for name in _exporters():
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    _configured = provider
    return provider
