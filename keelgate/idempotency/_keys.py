"""Deriving the idempotency key of one WRITE from what it does and where it runs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from keelgate.canonical import canonical_json

__all__ = ["KEY_PREFIX", "derive_key"]

KEY_PREFIX = "kg_"
"""Marks a key as Keelgate's, so a downstream system can tell it from its own ids."""

_HEX_CHARS = 40
"""160 bits of SHA-256: collision-free in practice, short enough for a header or a column."""


def derive_key(
    tenant_id: str,
    run_id: str,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    attempt: int = 0,
) -> str:
    """The stable idempotency key of one tool call.

    The key is a hash of the canonical JSON of the call, so the same call always gets
    the same key, whatever order its arguments were built in, and a resumed run that
    re-submits a saved action hits the key it claimed before the crash.

    Tenant and run are part of the hash on purpose: two runs (or two tenants) may place
    the same order deliberately, and those are two side effects, not one repeated. Only
    a repeat *within* a run is deduplicated.

    ``attempt`` exists for a call that was settled as abandoned (it did not take
    effect) and is then re-planned on purpose: the new attempt needs a fresh key, since
    the old one stays abandoned forever. Attempt 0 leaves the hash input unchanged, so
    keys derived before a retry existed never move.
    """
    if attempt < 0:
        raise ValueError("attempt must be zero or positive")
    payload: list[Any] = [tenant_id, run_id, tool, dict(arguments)]
    if attempt > 0:
        payload.append({"attempt": attempt})
    digest = hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
    return KEY_PREFIX + digest[:_HEX_CHARS]
