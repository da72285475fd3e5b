"""Canonical JSON: one byte string per value, so hashes and keys are stable."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_bytes", "canonical_json", "canonical_sha256"]


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 kept, no NaN: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    """:func:`canonical_json` encoded as UTF-8."""
    return canonical_json(value).encode("utf-8")


def canonical_sha256(value: Any) -> str:
    """The SHA-256 (hex) of :func:`canonical_bytes`: the identity of a value, such as the
    arguments an approval was given for."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()
