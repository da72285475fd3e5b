"""An unnumbered event's columns (``audit.store.pending_event``) encode the body once and
refuse exactly what the readable version refuses.

The readable version, kept here as the oracle: encode the body, encode it again through
``i_json`` and keep that text where the two differ, then check that RFC 8785 carries the
value by writing the leaf bytes of it. Over arbitrary bodies (floats, integers on both
sides of 2**53, lone surrogates, keys above U+FFFF, digit runs inside strings), the two
give the same columns or both refuse with the same kind of error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from audit.store import pending_event
from keelgate.audit import encode_body, i_json, leaf_bytes
from tests.unit.audit.test_leaf import SAFE, json_values, strings

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _readable(body: Any) -> str:
    """The body text as the store wrote it before, encoding it two or three times."""
    text, value = encode_body(body)
    if text != (safe := encode_body(i_json(value)))[0]:
        text, value = safe
    leaf_bytes({"body": value})
    return text


def _outcome(encode: Any, body: Any) -> str:
    try:
        return encode(body)
    except ValueError:  # UnicodeError and JSONDecodeError too
        return "ValueError"
    except TypeError:
        return "TypeError"


def _fast(body: Any) -> str:
    columns = pending_event("t", AT, "a", "k", body)
    return str(columns["body"])


@settings(max_examples=400, deadline=None)
@given(body=st.dictionaries(strings, json_values, max_size=6))
@example(body={"n": SAFE + 1, "m": -SAFE - 1, "s": "1234567890123456"})
@example(body={"s": "12345678901234567890", "f": 1.2345678901234567})
@example(body={"n": [SAFE, -SAFE], "deep": {"x": [2**64]}})
@example(body={"bad": "\ud800"})
@example(body={"\ud800": 1})
@example(body={"\U0001f600": 1.5, "\uffff": 2})
def test_the_body_is_encoded_as_the_readable_version_encodes_it(body: dict[str, Any]) -> None:
    """The same text, or the same refusal (ValueError or TypeError)."""
    assert _outcome(_fast, body) == _outcome(_readable, body)


def test_an_integer_beyond_two_to_the_53_is_its_decimal_text() -> None:
    columns = pending_event("t", AT, "a", "k", {"n": 2**64, "run_id": "r", "tool": "x"})
    assert columns["body"] == '{"n":"18446744073709551616","run_id":"r","tool":"x"}'
    assert (columns["run_id"], columns["tool"]) == ("r", "x")


def test_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValueError, match="RFC 8785"):
        pending_event("t", AT, "a", "k", {"s": "\udc00"})
