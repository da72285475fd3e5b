"""What a tree leaf holds: an event as a JSON object, in RFC 8785 (JCS) bytes.

The leaf object is the event as the REST API returns it under ``leaf``, so anyone can
recompute a leaf's hash from the API alone, in any language with a JCS library:

- ``v``: the form the event was written in, 1 (hash-chained, before the tree) or 2;
- ``tenant_id``, ``seq`` (the leaf's index plus one), ``at`` (ISO 8601 text exactly as
  stored), ``actor``, ``kind``, ``body`` (the event's JSON body);
- for ``v`` 1 only, ``prev_hash`` and ``hash``: the chain link it was written with (and an
  integer of its body beyond 2**53 as its decimal text: RFC 8785 numbers are doubles).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rfc8785

from keelgate.audit._event import encode_canonical
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
    """The leaf object of one stored event.

    A ``v`` 1 body (written before the tree, when any integer was stored) carries an
    integer beyond :data:`MAX_SAFE_INTEGER` as its decimal text (:func:`i_json`), as new
    bodies are stored; its chain ``hash`` still binds the value as stored.
    """
    if version == 1:
        body = i_json(body)
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

    json's C encoder writes it where its bytes are JCS's (:func:`_written_alike`, nearly
    every event), the rfc8785 package, pure Python and several times slower
    (docs/performance.md#tree-leaves), everywhere else (:func:`_jcs_bytes`, the readable
    version): the same bytes either way, as a property test pins.

    Raises ValueError for a value JCS cannot carry (an integer beyond ±(2**53 - 1), a
    float that is not finite, a string with no UTF-8 form), so such a body is refused when
    it is written, never hashed.
    """
    value = dict(leaf)
    if _written_alike(value):
        try:
            return encode_canonical(value).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: refused below, in the same words as everywhere
    return _jcs_bytes(value)


def _jcs_bytes(leaf: Mapping[str, Any]) -> bytes:
    """RFC 8785 as the rfc8785 package writes it, for any value; see :func:`leaf_bytes`."""
    try:
        return rfc8785.dumps(dict(leaf))
    # UnicodeError: rfc8785 orders keys by their UTF-16 form, which a lone surrogate lacks.
    except (rfc8785.CanonicalizationError, TypeError, UnicodeError) as exc:
        raise ValueError(f"not representable in RFC 8785: {exc}") from exc


def _written_alike(value: Any) -> bool:
    """Whether json's C encoder (``encode_canonical``: sorted keys, no whitespace, UTF-8
    text) writes ``value`` exactly as RFC 8785 does.

    Both escape the same characters the same way (the quote, the backslash, the control
    characters below U+0020: ``b f n r t`` by letter, the others as ``u00xx``, lowercase)
    and nothing else; they part on three things only:

    - numbers: JCS writes a float as ECMAScript does (``1``, ``10000000000000000``), json
      as Python's ``repr`` (``1.0``, ``1e+16``), and an integer beyond ±(2**53 - 1) is no
      JCS number;
    - key order: JCS sorts keys by UTF-16 code units, json by code points, which differ
      only where a key holds a character above U+FFFF (a surrogate pair, D800-DBFF, sorts
      before E000-FFFF);
    - types: exactly ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``bool`` and ``None``
      here; a subclass (an ``IntEnum``) may write itself otherwise.
    """
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and max(key) > "\uffff"):
                return False
            if not _written_alike(item):
                return False
        return True
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)
    if kind is list or kind is tuple:
        return all(_written_alike(item) for item in value)
    return False


def object_leaf_hash(leaf: Mapping[str, Any]) -> bytes:
    """``SHA-256(0x00 || JCS(leaf))``."""
    return leaf_hash(leaf_bytes(leaf))
