"""A leaf's bytes are the leaf object's RFC 8785 (JCS) serialisation, as the rfc8785 package writes it.

``rfc8785.dumps`` is the oracle: whatever route ``leaf_bytes`` takes, its bytes are
``rfc8785.dumps``'s, and what JCS cannot carry (a float that is not finite, an integer
beyond ±(2**53 - 1), a string with no UTF-8 form, a key that is not a string) is a
ValueError, never a hash.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections import OrderedDict
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from keelgate.audit import LEAF_FIELDS, leaf_bytes, leaf_object, object_leaf_hash

SAFE = 2**53 - 1

SPECIAL_CHARACTERS = [
    *(chr(c) for c in range(0x20)),
    '"',
    "\\",
    "/",
    "\x7f",
    "\x80",
    "\u00e9",
    "\u2028",
    "\u2029",
    "\ud7ff",
    "\ue000",
    "\ufeff",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\U0010ffff",
]
"""Every control character, the escapes, the line separators JavaScript once refused, and the
characters around the UTF-16 surrogate range, where JCS's key order and code point order part."""

characters = st.sampled_from(SPECIAL_CHARACTERS) | st.characters()
strings = st.text(characters, max_size=8)
integers = (
    st.integers(min_value=-SAFE, max_value=SAFE)
    | st.sampled_from([SAFE, -SAFE, SAFE + 1, -SAFE - 1, 2**64, -(2**64)])
    | st.integers()
)
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1.0, 1e21, 1e-7, 5e-324]
)
scalars = st.none() | st.booleans() | integers | floats | strings
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(strings, inner, max_size=4)
    ),
    max_leaves=24,
)


def _outcome(encode: Any, value: Any) -> bytes | str:
    """The bytes, or the name of the ValueError refusing the value."""
    try:
        return bytes(encode(value))
    except ValueError:
        return "ValueError"


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(value=st.dictionaries(strings, json_values, max_size=6))
@example(value={"\U0001f600": 1, "\uffff": 2, "\ue000": 3, "a": 4})
@example(value={"k": {"\U00010000x": [1], "\ufb01": None}})
@example(value={"n": SAFE, "m": -SAFE, "big": [SAFE + 1]})
@example(value={"s": "".join(SPECIAL_CHARACTERS)})
def test_leaf_bytes_are_rfc8785_bytes(value: dict[str, Any]) -> None:
    """Over arbitrary JSON objects, leaf_bytes gives rfc8785.dumps's bytes, or a ValueError where it does."""
    assert _outcome(leaf_bytes, value) == _outcome(rfc8785.dumps, value)


def test_a_typical_leaf() -> None:
    """An event's leaf object, keys sorted, no whitespace, non-ASCII written as UTF-8, integers bare."""
    leaf = leaf_object(
        version=2,
        tenant_id="t-1",
        seq=7,
        at="2026-01-01T00:00:00.000000+00:00",
        actor="agent:tr\u00e4der",
        kind="gateway.call",
        body={"tool": "place_order", "replayed": False, "code": None, "qty": 10, "tags": ["\u2028"]},
    )
    assert tuple(leaf) == LEAF_FIELDS
    expected = (
        '{"actor":"agent:tr\u00e4der","at":"2026-01-01T00:00:00.000000+00:00",'
        '"body":{"code":null,"qty":10,"replayed":false,"tags":["\u2028"],"tool":"place_order"},'
        '"kind":"gateway.call","seq":7,"tenant_id":"t-1","v":2}'
    ).encode()
    assert leaf_bytes(leaf) == expected == rfc8785.dumps(leaf)
    assert object_leaf_hash(leaf) == hashlib.sha256(b"\x00" + expected).digest()


def test_a_version_one_leaf_carries_its_chain_link() -> None:
    """A v1 leaf adds prev_hash and hash; a v2 leaf has neither."""
    common: dict[str, Any] = {"tenant_id": "t", "seq": 1, "at": "x", "actor": "a", "kind": "k", "body": {}}
    v1 = leaf_object(version=1, prev_hash="0" * 64, hash="f" * 64, **common)
    assert set(v1) == {*LEAF_FIELDS, "prev_hash", "hash"}
    assert (v1["prev_hash"], v1["hash"]) == ("0" * 64, "f" * 64)
    assert set(leaf_object(version=2, prev_hash="0" * 64, hash="f" * 64, **common)) == set(LEAF_FIELDS)


def test_keys_are_ordered_by_utf16_code_units() -> None:
    """A key above U+FFFF sorts before U+E000..U+FFFF (its high surrogate is D8xx), not after."""
    value = {"\uffff": 1, "\U0001f600": 2, "\ue000": 3}
    assert leaf_bytes(value) == '{"\U0001f600":2,"\ue000":3,"\uffff":1}'.encode()


@pytest.mark.parametrize(
    "value",
    [
        {"n": 2**53},
        {"n": -(2**53)},
        {"n": [1, {"deep": 2**64}]},
        {"x": math.nan},
        {"x": [math.inf]},
        {"x": {"y": -math.inf}},
        {"s": "lone \ud800 surrogate"},
        {"lone \udc00": 1},
        {"k": {1: "int key"}},
        {"d": Decimal("1.5")},
        {"t": datetime(2026, 1, 1, tzinfo=UTC)},
        {"b": b"bytes"},
        {"s": {1, 2}},
    ],
)
def test_what_jcs_cannot_carry_is_a_value_error(value: dict[str, Any]) -> None:
    """Integers beyond ±(2**53 - 1), NaN and infinities, lone surrogates, non-string keys, non-JSON types."""
    with pytest.raises(ValueError, match="not representable in RFC 8785"):
        leaf_bytes(value)


def test_the_largest_safe_integers_are_carried() -> None:
    """±(2**53 - 1) are JSON's exact integers: written bare."""
    assert leaf_bytes({"n": [SAFE, -SAFE]}) == f'{{"n":[{SAFE},{-SAFE}]}}'.encode()


class Colour(enum.IntEnum):
    RED = 1


class Mood(enum.StrEnum):
    CALM = "calm"


def test_subclasses_of_json_types_are_written_as_rfc8785_writes_them() -> None:
    """An IntEnum, a StrEnum and an OrderedDict give rfc8785.dumps's bytes."""
    value = {"c": Colour.RED, "m": Mood.CALM, "o": OrderedDict([("b", 1), ("a", True)])}
    assert leaf_bytes(value) == rfc8785.dumps(value) == b'{"c":1,"m":"calm","o":{"a":true,"b":1}}'


def test_floats_are_written_as_ecmascript_writes_them() -> None:
    """1.0 is 1, 1e21 is 1e+21, -0.0 is 0: JCS's number form, not Python's repr."""
    assert leaf_bytes({"f": [1.0, 1e21, 1e-7, -0.0, 0.1]}) == b'{"f":[1,1e+21,1e-7,0,0.1]}'


@pytest.fixture
def rfc8785_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The values rfc8785.dumps is asked to write (it still writes them)."""
    calls: list[Any] = []
    real = rfc8785.dumps

    def counted(value: Any) -> bytes:
        calls.append(value)
        return real(value)

    monkeypatch.setattr(rfc8785, "dumps", counted)
    return calls


def test_an_event_without_floats_is_written_by_json_not_rfc8785(rfc8785_calls: list[Any]) -> None:
    """Strings of any character (astral, control, U+2028), safe integers, booleans, null, lists,
    nested objects: json's C encoder writes them, rfc8785 is not called."""
    value = {
        "v": 2,
        "body": {"s": "".join(SPECIAL_CHARACTERS), "n": [SAFE, -SAFE, 0], "ok": True, "none": None},
        "\u00e9\uffff": ("tuple", {"\ue000": []}),
    }
    expected = rfc8785.dumps(value)
    rfc8785_calls.clear()
    assert leaf_bytes(value) == expected
    assert rfc8785_calls == []


@pytest.mark.parametrize(
    "value",
    [
        {"f": 1.5},
        {"b": {"f": [0.0]}},
        {"n": SAFE + 1},
        {"n": [-SAFE - 1]},
        {"\U0001f600": 1},
        {"o": {"x\U00010000": 1}},
        {"c": Colour.RED},
        {"m": Mood.CALM},
        {"o": OrderedDict(a=1)},
        {"s": "\ud800"},
        {"k": {1: 1}},
        {"d": Decimal(1)},
    ],
)
def test_what_json_would_write_otherwise_goes_to_rfc8785(
    rfc8785_calls: list[Any], value: dict[str, Any]
) -> None:
    """A float, an unsafe integer, a key above U+FFFF, a subclass or another type, a lone
    surrogate: rfc8785 writes (or refuses) the leaf."""
    _outcome(leaf_bytes, value)
    assert len(rfc8785_calls) == 1
