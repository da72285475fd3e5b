"""linked_parts: the hashed bytes around an event's number, for a store whose database links it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from keelgate.audit import GENESIS_HASH, encode_body, format_at, linked_parts, stored_event

AT = datetime(2026, 12, 1, 9, 30, 0, 120, tzinfo=UTC)


@pytest.mark.parametrize(
    ("tenant", "actor", "kind", "body"),
    [
        ("t1", "agent:trader", "loop.planned", {"run_id": "r1", "n": 1}),
        ('t"1', "bob\\", 'k,"seq":0,', {"text": ',"seq":0,"tenant_id":"x"}', "ü": "€ 😀"}),
        ("täñ", "%s %(x)s", "gateway.call", {"nested": {"a": [1, 2.5, None, True]}}),
    ],
)
@pytest.mark.parametrize("seq", [1, 9, 10, 12345])
def test_prev_hash_before_seq_after_are_the_bytes_the_event_is_hashed_over(tenant, actor, kind, body, seq):
    """Same bytes as the event's own link, for any text, so a database computes the same hash."""
    import hashlib

    encoded = encode_body(body)
    event = stored_event(tenant, seq, AT, actor, kind, encoded, GENESIS_HASH)
    before, after = linked_parts(tenant, format_at(AT), actor, kind, encoded[0])
    linked = f"{GENESIS_HASH}{before}{seq}{after}".encode()
    assert hashlib.sha256(linked).hexdigest() == event.hash
