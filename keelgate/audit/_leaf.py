"""What a tree leaf holds: an event as a JSON object, in RFC 8785 (JCS) bytes.

The leaf object is the event as the REST API returns it under ``leaf``, so anyone can
recompute a leaf's hash from the API alone, in any language with a JCS library:

- ``v``: the form the event was written in, 1 (hash-chained, before the tree) or 2;
- ``tenant_id``, ``seq`` (the leaf's index plus one), ``at`` (ISO 8601 text exactly as
  stored), ``actor``, ``kind``, ``body`` (the event's JSON body);
- for ``v`` 1 only, ``prev_hash`` and ``hash``: the chain link it was written with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rfc8785

from keelgate.audit._merkle import leaf_hash

__all__ = ["LEAF_FIELDS", "MAX_SAFE_INTEGER", "i_json", "leaf_bytes", "leaf_object", "object_leaf_hash"]

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer RFC 8785 carries (its numbers are IEEE 754 doubles, as I-JSON's)."""

LEAF_FIELDS = ("v", "tenant_id", "seq", "at", "actor", "kind", "body")
"""The fields of every leaf object; a ``v`` 1 leaf adds ``prev_hash`` and ``hash``."""


def leaf_object(
    *,
    version: int,
    tenant_id: str,
    seq: int,
    at: str,
    actor: str,
    kind: str,
    body: Mapping[str, Any],
    prev_hash: str = "",
    hash: str = "",
) -> dict[str, Any]:
    """The leaf object of one stored event."""
    leaf: dict[str, Any] = {
        "v": version,
        "tenant_id": tenant_id,
        "seq": seq,
        "at": at,
        "actor": actor,
        "kind": kind,
        "body": body,
    }
    if version == 1:
        leaf["prev_hash"] = prev_hash
        leaf["hash"] = hash
    return leaf


def i_json(value: Any) -> Any:
    """``value`` with every integer beyond :data:`MAX_SAFE_INTEGER` as its decimal text.

    I-JSON's (RFC 7493) advice for such numbers, so an event that quotes one (a tool's
    argument, say) is still recorded, exactly, instead of failing the change it records.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else str(value)
    if isinstance(value, Mapping):
        return {k: i_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [i_json(v) for v in value]
    return value


def leaf_bytes(leaf: Mapping[str, Any]) -> bytes:
    """The leaf's data: the object's RFC 8785 serialisation.

    Raises ValueError for a value JCS cannot carry (an integer beyond ±2**53, a float
    that is not finite), so such a body is refused when it is written, never hashed.
    """
    try:
        return rfc8785.dumps(dict(leaf))
    except (rfc8785.CanonicalizationError, TypeError) as exc:
        raise ValueError(f"not representable in RFC 8785: {exc}") from exc


def object_leaf_hash(leaf: Mapping[str, Any]) -> bytes:
    """``SHA-256(0x00 || JCS(leaf))``."""
    return leaf_hash(leaf_bytes(leaf))
