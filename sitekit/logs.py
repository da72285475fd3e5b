"""Structured logs through the standard ``logging`` module: JSON lines, or readable lines.

Every line carries the ids of what it concerns (tenant, run, action, worker, trace),
bound with :func:`log_context` for the duration of a block (a ``contextvars`` variable,
so it follows asyncio tasks and never leaks to another thread's lines); a line written
inside a traced span without a bound trace id takes the span's. Production writes one
JSON object per line (:class:`JsonFormatter`), development ``time level logger message
k=v ...`` (:class:`TextFormatter`). Two small formatters rather than structlog: every
library here already logs through ``logging``, so the formatter is the one place all
lines pass, and a second logging API would only give the same lines two shapes.

Never bind or log a secret (an API key, a session id, a password, a webhook secret):
ids only, as the audit chain does.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["FIELDS", "JsonFormatter", "TextFormatter", "bound", "log_context"]

FIELDS = ("tenant", "run", "action", "worker", "trace")
"""The ids a line may carry, in this order."""

_context: ContextVar[dict[str, str]] = ContextVar("keelgate_log_context", default={})  # noqa: B039  (never mutated: each bind makes a new dict)


@contextmanager
def log_context(**ids: object) -> Iterator[None]:
    """Bind ids (``tenant=``, ``run=``, ...) to every line logged inside the block (None, "" left out)."""
    added = {k: str(v) for k, v in ids.items() if v is not None and v != ""}
    token = _context.set({**_context.get(), **added})
    try:
        yield
    finally:
        _context.reset(token)


def bound() -> dict[str, str]:
    """The ids bound here now, with the current span's trace id if none is bound."""
    ids = dict(_context.get())
    if "trace" not in ids:
        trace = _current_trace_id()
        if trace:
            ids["trace"] = trace
    return ids


def _current_trace_id() -> str:
    try:
        from opentelemetry import trace
    except ImportError:  # tracing is optional
        return ""
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else ""


def _ids(record: logging.LogRecord) -> dict[str, str]:
    ids = bound()
    extra = getattr(record, "ids", None)  # logger.info(..., extra={"ids": {...}})
    if isinstance(extra, dict):
        ids.update({k: str(v) for k, v in extra.items() if v is not None})
    return ids


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the bound ids, and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(_ids(record))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message k=v ...``: the same fields, for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = _ids(record)
        if not ids:
            return text
        head, sep, tail = text.partition("\n")  # keep a traceback below the line
        return head + " " + " ".join(f"{k}={v}" for k, v in ids.items()) + sep + tail
