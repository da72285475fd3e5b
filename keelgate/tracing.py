"""Traces of runs for OpenTelemetry, when the ``otel`` extra (``opentelemetry-api``) is installed.

One trace per run. Every span of a run, in any process and across every resume, belongs
to the trace named by ``LoopState.trace_id``: a drive (a start or a resume) opens a
``keelgate.run`` span whose parent is the run's remote root, built from the stored trace
id and a span id derived from the run id, so a run resumed by another worker, and a
decision taken in a web process, continue the same trace. Inside a drive:
``keelgate.plan``, ``keelgate.tool_call`` (tool, side effect, idempotency key, status),
``keelgate.verify``; beside it ``keelgate.decision`` for each person's decision and
``keelgate.unknown_outcome.wait`` from a call's claim until its unknown outcome was
settled. No span carries a call's arguments, its output, the goal or a note: they are
untrusted and may be secret.

The engine only uses the API; the host installs an SDK (the site does, from the standard
``OTEL_*`` variables). Without the API, or with the API's default no-op provider, every
helper here returns one shared no-op object, so the loop pays a global read per span.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from keelgate._state import ActionOutcome, LoopState, PlannedAction

try:
    from opentelemetry import trace as _otel
    from opentelemetry.context import Context
except ImportError:  # the extra is optional: no tracing at all
    _otel = None  # type: ignore[assignment]  # mypy sees the installed API; at run time it may be absent

__all__ = ["SPAN_NAMES", "TRACER_NAME", "otel_trace_id", "run_context"]

TRACER_NAME = "keelgate"
"""The instrumentation scope of every span the engine makes."""

SPAN_NAMES = (
    "keelgate.run",
    "keelgate.plan",
    "keelgate.tool_call",
    "keelgate.verify",
    "keelgate.decision",
    "keelgate.unknown_outcome.wait",
)
"""Every span name the engine uses; attributes are namespaced ``keelgate.*``."""

_HEX32 = re.compile(r"[0-9a-f]{32}")


def otel_trace_id(trace_id: str) -> int:
    """The 128-bit trace id of a run's ``trace_id``: itself if it is 32 hex digits, else a hash of it."""
    text = trace_id.lower()
    if _HEX32.fullmatch(text) and int(text, 16):
        return int(text, 16)
    return int(hashlib.sha256(trace_id.encode()).hexdigest()[:32], 16) or 1


def _root_span_id(run_id: str) -> int:
    """A stable span id for the run's root, the same in every process."""
    return int(hashlib.sha256(f"keelgate.run:{run_id}".encode()).hexdigest()[:16], 16) or 1


def run_context(trace_id: str, run_id: str) -> Context | None:
    """The context whose spans join the run's trace (None without the API)."""
    if _otel is None:
        return None
    root = _otel.SpanContext(
        trace_id=otel_trace_id(trace_id),
        span_id=_root_span_id(run_id),
        is_remote=True,
        trace_flags=_otel.TraceFlags(_otel.TraceFlags.SAMPLED),
    )
    return _otel.set_span_in_context(_otel.NonRecordingSpan(root))


class SpanHandle(Protocol):
    """What the loop may do with an open span: add a ``keelgate.<key>`` attribute."""

    def set(self, key: str, value: str | int | bool | None) -> None:
        """Record one attribute (None is left out)."""
        ...


class _NullSpan:
    """The span when tracing is off: one shared object, nothing recorded."""

    __slots__ = ()

    def set(self, key: str, value: str | int | bool | None) -> None:
        return None

    def __enter__(self) -> _NullSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _NullSpan()


class _Handle:
    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: str | int | bool | None) -> None:
        if value is not None:
            self._span.set_attribute(f"keelgate.{key}", value)


_cached: tuple[object, Any] | None = None
_driving: ContextVar[Any] = ContextVar("keelgate_driving_tracer", default=None)
"""The tracer of the drive in progress here, None when untraced: a phase's span asks it,
not the global provider, so an untraced step costs one context-variable read."""


def _tracer() -> Any:
    """The tracer of the installed SDK, or None while only the no-op provider exists."""
    global _cached
    if _otel is None:
        return None
    provider = _otel.get_tracer_provider()
    if isinstance(provider, _otel.ProxyTracerProvider | _otel.NoOpTracerProvider):
        return None
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(TRACER_NAME))
    return _cached[1]


def _attrs(state: LoopState, **extra: str | int | bool | None) -> dict[str, str | int | bool]:
    base: dict[str, str | int | bool | None] = {
        "tenant_id": state.tenant_id,
        "run_id": state.run_id,
        "agent_id": state.agent_id,
        **extra,
    }
    return {f"keelgate.{k}": v for k, v in base.items() if v is not None}


@contextmanager
def _span(
    tracer: Any, name: str, context: Context | None, attributes: Mapping[str, Any]
) -> Iterator[_Handle]:
    with tracer.start_as_current_span(name, context=context, attributes=attributes) as span:
        yield _Handle(span)


@contextmanager
def _drive_span(tracer: Any, context: Context | None, attributes: Mapping[str, Any]) -> Iterator[_Handle]:
    token = _driving.set(tracer)
    try:
        with _span(tracer, "keelgate.run", context, attributes) as handle:
            yield handle
    finally:
        _driving.reset(token)


def run_span(state: LoopState) -> AbstractContextManager[SpanHandle]:
    """A ``keelgate.run`` span around one drive, child of the run's root (a context manager)."""
    tracer = _tracer()
    if tracer is None:
        return _NULL
    attributes = _attrs(state, trace_id=state.trace_id, start_seq=state.seq, resumed=state.seq > 1)
    return _drive_span(tracer, run_context(state.trace_id, state.run_id), attributes)


def step_span(name: str, state: LoopState) -> AbstractContextManager[SpanHandle]:
    """A phase's span (``keelgate.plan``, ``keelgate.verify``) inside the current drive."""
    tracer = _driving.get()
    if tracer is None:
        return _NULL
    iteration = state.iteration + 1 if name == "keelgate.plan" else state.iteration  # the one it plans
    return _span(tracer, name, None, _attrs(state, iteration=iteration))


def tool_call_span(state: LoopState, action: PlannedAction) -> AbstractContextManager[SpanHandle]:
    """A ``keelgate.tool_call`` span: what was called and under which key, never with what."""
    tracer = _driving.get()
    if tracer is None:
        return _NULL
    side_effect = action.side_effect.value if action.side_effect is not None else None
    attributes = _attrs(
        state,
        action_id=action.action_id,
        tool=action.tool,
        side_effect=side_effect,
        idempotency_key=action.idempotency_key,
    )
    return _span(tracer, "keelgate.tool_call", None, attributes)


def call_finished(span: SpanHandle, outcome: ActionOutcome) -> None:
    """Record how the call ended on its span."""
    span.set("status", outcome.status.value)
    span.set("code", outcome.code)
    span.set("replayed", outcome.replayed)


DECISION_KINDS = frozenset(
    {
        "approval.decided",
        "approval.edited",
        "approval.escalated",
        "approval.expired",
        "loop.reconciled",
        "run.cancelled",
    }
)
"""Audit kinds that record a decision (a person's, a confirmer's or a deadline's): each gets a span."""

_DECISION_FIELDS = ("action_id", "new_action_id", "tool", "decision", "verdict", "source", "approvals")


def decision(state: LoopState, kind: str, actor: str, body: Mapping[str, Any]) -> None:
    """A ``keelgate.decision`` span for a decision's audit event (its plain fields only)."""
    tracer = _tracer()
    if tracer is None:
        return
    fields = {k: body[k] for k in _DECISION_FIELDS if isinstance(body.get(k), str | int)}
    attributes = _attrs(state, kind=kind, actor=actor, **fields)
    tracer.start_span(
        "keelgate.decision", context=run_context(state.trace_id, state.run_id), attributes=attributes
    ).end()


def unknown_wait(
    state: LoopState, action: PlannedAction, *, since: datetime | None, verdict: str, source: str
) -> None:
    """A ``keelgate.unknown_outcome.wait`` span from ``since`` (the call's claim) until now."""
    tracer = _tracer()
    if tracer is None:
        return
    attributes = _attrs(
        state,
        action_id=action.action_id,
        tool=action.tool,
        idempotency_key=action.idempotency_key,
        verdict=verdict,
        source=source,
    )
    start = int(since.timestamp() * 1e9) if since is not None else None
    span = tracer.start_span(
        "keelgate.unknown_outcome.wait",
        context=run_context(state.trace_id, state.run_id),
        attributes=attributes,
        start_time=start,
    )
    span.end()
