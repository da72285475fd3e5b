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
ids only, as the audit chain does. What a client sends is not ours to choose, though: a
key pasted into a query string (``?api_key=kg_...``) or a URL path reaches the access
log and Django's "Not Found: /path" lines. :func:`redact_url` is what the web process's
access log writes of a request's target, and both formatters pass every line through
:func:`redact_text`: credential-looking query parameters keep their name and lose their
value, and anything shaped like one of this product's secrets (``kg_`` keys, ``kgl_`` email
link tokens, ``whsec_`` webhook secrets) or an ``Authorization`` value (``Bearer ...``, ``Basic ...``) is
replaced, wherever it stands.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote_plus

__all__ = [
    "FIELDS",
    "REDACTED",
    "JsonFormatter",
    "RedactingFilter",
    "TextFormatter",
    "bound",
    "credential_name",
    "log_context",
    "redact_text",
    "redact_url",
]

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


REDACTED = "[redacted]"
"""What a log line shows in place of a credential."""

_CREDENTIAL_PARTS = (
    "key",
    "token",
    "secret",
    "passw",
    "pwd",
    "auth",
    "session",
    "signature",
    "credential",
    "cookie",
    "jwt",
    "bearer",
    "csrf",
)
"""A parameter whose name contains one of these (``api_key``, ``X-Api-Key``, ``access_token``,
``client_secret``, ``password``, ``authorization``, ``sessionid``) carries a credential."""
_CREDENTIAL_WORDS = frozenset({"sig", "sid", "pw", "pass", "otp", "code", "hmac"})
"""Short names that are credentials only as a whole word (``sig``, ``code``), not inside another."""

_SECRET_SHAPE = re.compile(r"\b(?:kg|kgl|whsec)_[A-Za-z0-9_+/=-]{16,}")
"""This product's secrets: API keys (``kg_<prefix>_<secret>``), the tokens of email decision links
(``kgl_``, in a link's path and in the login's ``next``) and webhook secrets (``whsec_``)."""
_AUTH_VALUE = re.compile(r"\b(Bearer|Basic|Digest|Token|ApiKey)(\s+)[A-Za-z0-9._~+/=:-]{12,}")
"""An ``Authorization`` value as it would be written into a line: its scheme, then the credential."""
_AUTH_HEADER = re.compile(
    r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?!(?-i:Bearer|Basic|Digest|Token|ApiKey)\s)[^\s\"',]+"
)
"""``Authorization: <anything>`` (a bare key, an unknown scheme): the first word after it."""
_QUERY = re.compile(r"\?([^\s\"'<>]*)")


def credential_name(name: str) -> bool:
    """Whether a query or form parameter named ``name`` (any case, any encoding) holds a credential."""
    plain = unquote_plus(name).lower()
    words = {w for w in re.split(r"[^a-z0-9]+", plain) if w}
    joined = "".join(words)
    return any(part in joined for part in _CREDENTIAL_PARTS) or bool(words & _CREDENTIAL_WORDS)


def _secret_in(text: str) -> bool:
    return bool(_SECRET_SHAPE.search(text) or _SECRET_SHAPE.search(unquote_plus(text)))


def _redact_query(query: str) -> str:
    parts = []
    for part in re.split(r"([&;])", query):
        if part in ("&", ";"):
            parts.append(part)
            continue
        name, sep, value = part.partition("=")
        if sep and (credential_name(name) or _secret_in(value)):
            part = f"{name}={REDACTED}"
        elif not sep and _secret_in(part):
            part = REDACTED
        parts.append(part)
    return "".join(parts)


def redact_url(target: str) -> str:
    """A request target (``/path?query``) fit for a log line: every credential replaced.

    The path and the parameter names stay, so a line still says what was asked
    (``GET /api/v1/runs?status=waiting&api_key=[redacted]``); a credential-looking
    parameter's value, and a path segment or value shaped like a secret of this product
    (percent-encoded or not), become ``[redacted]``. Redacted rather than cut at the
    ``?``: an operator reading an access log expects to see which filter or page a slow
    or failing request asked for, and only the credentials are not theirs to read.
    """
    path, sep, query = target.partition("?")
    segments = [REDACTED if _secret_in(s) else s for s in path.split("/")]
    return "/".join(segments) + sep + _redact_query(query)


def redact_text(text: str) -> str:
    """Free text (a log message, a traceback) with credentials in it replaced.

    Query strings in it are redacted as :func:`redact_url` does, an ``Authorization``
    value after its scheme (``Bearer``, ``Basic``, ...) is replaced, and so is anything
    shaped like one of this product's secrets.
    """
    if "?" in text:
        text = _QUERY.sub(lambda m: "?" + _redact_query(m.group(1)), text)
    text = _AUTH_VALUE.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
    return _SECRET_SHAPE.sub(REDACTED, text)


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
            "msg": redact_text(record.getMessage()),
        }
        line.update(_ids(record))
        if record.exc_info:
            line["exc"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message k=v ...``: the same fields, for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = redact_text(super().format(record))
        ids = _ids(record)
        if not ids:
            return text
        head, sep, tail = text.partition("\n")  # keep a traceback below the line
        return head + " " + " ".join(f"{k}={v}" for k, v in ids.items()) + sep + tail


class RedactingFilter(logging.Filter):
    """Redacts a record before any handler formats it: for handlers this module does not format.

    Daphne configures the root logger itself (``logging.basicConfig``, its own format), so
    its lines and those of Twisted and asyncio pass no formatter of ours; the web process
    puts this filter on the root's handlers. The record is changed in place: its message
    is the redacted text, and its exception, formatted once, is redacted too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact_text(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True
