"""What the OpenAI planner and verifier share: the client, error wording, untrusted text.

The client is the official ``openai`` one, so any OpenAI-compatible endpoint works.
Retries default to none: a retried call is a second paid call the budgets never
agreed to, and a failed call is better reported (the loop stops, resumable) than
silently repeated.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypeGuard

import openai

from keelgate.errors import ConfigurationError

__all__ = [
    "MODEL_ENV",
    "MaxTokensField",
    "api_error_detail",
    "estimate_tokens",
    "is_count",
    "make_client",
    "resolve_model",
    "safe_json_object",
    "token_cap",
    "untrusted_block",
]

MODEL_ENV = "KEELGATE_MODEL"
"""The environment variable naming the model when ``model=`` is not given."""

MaxTokensField = Literal["max_completion_tokens", "max_tokens"]
"""How the output cap is sent: OpenAI's current name, or the older one some servers still need."""


def resolve_model(model: str | None) -> str:
    """The model from the argument, else from ``KEELGATE_MODEL``; neither is a wiring error."""
    resolved = model or os.environ.get(MODEL_ENV, "")
    if not resolved:
        raise ConfigurationError(f"no model: pass model= or set {MODEL_ENV}")
    return resolved


def make_client(
    *,
    base_url: str | None,
    api_key: str | None,
    timeout: float,
    max_retries: int,
    client: openai.AsyncOpenAI | None,
) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` from the arguments, falling back to ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``."""
    if client is not None:
        return client
    key = api_key or os.environ.get("OPENAI_API_KEY", "")
    if not key:
        raise ConfigurationError("no API key: pass api_key= or set OPENAI_API_KEY")
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
        timeout=timeout,
        max_retries=max_retries,
    )


def token_cap(field: MaxTokensField, max_tokens: int | None) -> dict[str, int]:
    """The request's output cap under the field name the endpoint understands."""
    return {} if max_tokens is None else {field: max_tokens}


def api_error_detail(exc: BaseException) -> str:
    """Fixed wording for a failed call: the error class and HTTP status, never the body.

    The body of an error response is the provider's text (and may echo the prompt), so
    it is not trusted detail.
    """
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return f"openai: {name} (HTTP {status})"
    return f"openai: {name}"


_TAG = re.compile(r"</?untrusted", re.IGNORECASE)


def untrusted_block(
    text: str, *, kind: str, action_id: str | None = None, published_at: datetime | None = None
) -> str:
    """Wrap untrusted text so the model reads it as data.

    Any ``<untrusted`` or ``</untrusted`` inside the text is defanged, so the data cannot
    close its own block and pose as the harness.
    """
    attrs = f' kind="{kind}"'
    if action_id:
        attrs += f' action_id="{action_id}"'
    if published_at is not None:
        attrs += f' published_at="{published_at.isoformat()}"'
    body = _TAG.sub(lambda m: "&lt;" + m.group(0)[1:], text)
    return f"<untrusted{attrs}>\n{body}\n</untrusted>"


def _no_constants(name: str) -> Any:
    raise ValueError(name)


def safe_json_object(raw: object) -> dict[str, Any] | None:
    """``raw`` read as a JSON object that can be stored canonically, or None.

    NaN, Infinity and numbers too large for a float are refused: the checkpoint and
    the idempotency key are canonical JSON, which has no room for them.
    """
    value: object = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return None
    return dict(value)


def estimate_tokens(payload: Mapping[str, Any]) -> int:
    """About four characters a token over the JSON actually sent: an honest over-estimate."""
    return len(json.dumps(payload, ensure_ascii=False, default=str)) // 4 + 1


def is_count(value: object) -> TypeGuard[int]:
    """A token count a server reported that can be used as one."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
