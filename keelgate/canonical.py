"""Canonical JSON: one byte string per value, so hashes and keys are stable."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_bytes", "canonical_json"]


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 kept, no NaN: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    """:func:`canonical_json` encoded as UTF-8."""
    return canonical_json(value).encode("utf-8")
