"""Verification finds every kind of tampering, and names the first broken link."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keelgate.audit import (
    GENESIS_HASH,
    AuditEvent,
    ChainReport,
    InMemoryAuditLog,
    SqliteAuditLog,
    compute_hash,
    encode_body,
    fast_canonical,
    format_at,
    stored_event,
    verify,
    verify_chain,
)
from keelgate.canonical import canonical_bytes, canonical_json
from keelgate.errors import ChainBrokenError

T0 = datetime(2025, 3, 1, 12, 0, 0, 0, tzinfo=UTC)
"""Whole seconds on purpose: the stored time must keep its ``.000000``."""


def make_chain(
    n: int, *, tenant: str = "t1", start: int = 1, prev: str = GENESIS_HASH, actor: str = "agent"
) -> list[AuditEvent]:
    """``n`` correctly linked events from seq ``start``, linked to ``prev``."""
    events: list[AuditEvent] = []
    for seq in range(start, start + n):
        event = AuditEvent.build(tenant, seq, T0 + timedelta(seconds=seq), actor, "note", {"n": seq}, prev)
        events.append(event)
        prev = event.hash
    return events


def rehashed(event: AuditEvent, **changes: Any) -> AuditEvent:
    """``event`` with ``changes`` and its hash recomputed: a careful forger's edit."""
    data = event.model_dump() | changes
    del data["hash"]
    return AuditEvent.build(**data)


def broken(report: ChainReport) -> tuple[bool, str | None, int | None]:
    return report.ok, report.reason, report.first_bad_seq


CHAIN = make_chain(8)
HEAD = (CHAIN[-1].seq, CHAIN[-1].hash)


# -- in memory: edits, deletions, insertions, reorders ------------------------------------


def test_an_intact_chain_verifies_with_its_head() -> None:
    """An untouched chain is ok, fully checked, with its last event as head."""
    report = verify_chain(CHAIN, tenant_id="t1", expect_head=HEAD)
    assert report == ChainReport(True, 8, 8, CHAIN[-1].hash, None, None)


@pytest.mark.parametrize(
    "change",
    [
        {"body": {"n": 999}},
        {"actor": "mallory"},
        {"kind": "other"},
        {"at": T0 + timedelta(days=1)},
    ],
    ids=["body", "actor", "kind", "at"],
)
def test_an_edited_field_is_a_hash_mismatch_at_that_event(change: dict[str, Any]) -> None:
    """Editing any hashed field of event 4 fails at 4 with hash_mismatch; 1..3 still count."""
    chain = list(CHAIN)
    chain[3] = chain[3].model_copy(update=change)
    report = verify_chain(chain)
    assert broken(report) == (False, "hash_mismatch", 4)
    assert (report.checked, report.head_seq, report.head_hash) == (3, 3, CHAIN[2].hash)


def test_an_edit_with_its_hash_recomputed_breaks_the_next_link() -> None:
    """Re-hashing the edited event 4 moves the break to 5: prev_hash_mismatch."""
    chain = list(CHAIN)
    chain[3] = rehashed(chain[3], body={"n": 999})
    assert broken(verify_chain(chain)) == (False, "prev_hash_mismatch", 5)


def test_a_rehashed_edit_of_the_last_event_needs_the_digest() -> None:
    """A re-hashed last event links up; only the exported head shows the rewrite."""
    chain = [*CHAIN[:-1], rehashed(CHAIN[-1], actor="mallory")]
    assert verify_chain(chain).ok
    assert broken(verify_chain(chain, expect_head=HEAD)) == (False, "digest_mismatch", 8)


def test_the_first_of_several_breaks_is_reported() -> None:
    """With events 3 and 6 edited, the report names 3."""
    chain = list(CHAIN)
    for index in (2, 5):
        chain[index] = chain[index].model_copy(update={"body": {}})
    assert broken(verify_chain(chain)) == (False, "hash_mismatch", 3)


@pytest.mark.parametrize("index", [0, 3], ids=["first", "middle"])
def test_a_deleted_event_is_a_sequence_gap_at_the_missing_number(index: int) -> None:
    """Deleting event k fails at k with sequence_gap."""
    chain = CHAIN[:index] + CHAIN[index + 1 :]
    assert broken(verify_chain(chain)) == (False, "sequence_gap", index + 1)


def test_truncation_is_caught_only_by_the_digest() -> None:
    """Dropping the last two events leaves a valid chain; the exported head catches it."""
    chain = CHAIN[:-2]
    assert verify_chain(chain).ok
    report = verify_chain(chain, expect_head=HEAD)
    assert broken(report) == (False, "digest_mismatch", 8)
    assert report.checked == 6


def test_an_inserted_forged_event_breaks_the_sequence_after_it() -> None:
    """A correctly linked forgery inserted as 4 leaves the old 4 at position 5: sequence_gap."""
    (forged,) = make_chain(1, start=4, prev=CHAIN[2].hash, actor="mallory")
    chain = [*CHAIN[:3], forged, *CHAIN[3:]]
    assert broken(verify_chain(chain)) == (False, "sequence_gap", 5)


def test_an_inserted_forgery_with_renumbering_breaks_the_next_link() -> None:
    """A forgery as 4 with the later events renumbered fails at 5: prev_hash_mismatch."""
    (forged,) = make_chain(1, start=4, prev=CHAIN[2].hash, actor="mallory")
    shifted = [event.model_copy(update={"seq": event.seq + 1}) for event in CHAIN[3:]]
    assert broken(verify_chain([*CHAIN[:3], forged, *shifted])) == (
        False,
        "prev_hash_mismatch",
        5,
    )


def test_a_full_rewrite_from_seq_3_is_caught_only_by_the_digest() -> None:
    """Rewriting 3..8 with every hash recomputed links up; the old head proves the rewrite."""
    forged = make_chain(6, start=3, prev=CHAIN[1].hash, actor="mallory")
    chain = [*CHAIN[:2], *forged]
    assert verify_chain(chain, tenant_id="t1").ok
    report = verify_chain(chain, tenant_id="t1", expect_head=HEAD)
    assert broken(report) == (False, "digest_mismatch", 8)
    # A digest exported before the rewrite point still matches: the rewrite began later.
    assert verify_chain(chain, expect_head=(2, CHAIN[1].hash)).ok


def test_swapped_events_are_a_sequence_gap() -> None:
    """Swapping events 3 and 4 in place fails at 3 with sequence_gap."""
    chain = list(CHAIN)
    chain[2], chain[3] = chain[3], chain[2]
    assert broken(verify_chain(chain)) == (False, "sequence_gap", 3)


def test_swapped_and_renumbered_events_break_the_link() -> None:
    """Swapping the contents of 3 and 4 but keeping the numbers fails at 3: prev_hash_mismatch."""
    chain = list(CHAIN)
    chain[2], chain[3] = (
        CHAIN[3].model_copy(update={"seq": 3}),
        CHAIN[2].model_copy(update={"seq": 4}),
    )
    assert broken(verify_chain(chain)) == (False, "prev_hash_mismatch", 3)


def test_another_tenants_event_is_wrong_tenant() -> None:
    """An event of tenant t2 in t1's chain is wrong_tenant, named or inferred from the first."""
    other = make_chain(4, tenant="t2")
    chain = [*CHAIN[:3], other[3], *CHAIN[4:]]
    assert broken(verify_chain(chain, tenant_id="t1")) == (False, "wrong_tenant", 4)
    assert broken(verify_chain(chain)) == (False, "wrong_tenant", 4)
    assert broken(verify_chain(CHAIN, tenant_id="t2")) == (False, "wrong_tenant", 1)


def test_a_chain_not_rooted_at_genesis_is_a_prev_hash_mismatch() -> None:
    """A first event linked to anything but GENESIS_HASH fails at 1."""
    chain = make_chain(3, prev="a" * 64)
    assert broken(verify_chain(chain)) == (False, "prev_hash_mismatch", 1)


def test_unhashable_fields_are_a_hash_mismatch_not_a_crash() -> None:
    """A forged body with NaN, or a time that is not a time, reports hash_mismatch."""
    for change in ({"body": {"x": float("nan")}}, {"at": "yesterday"}):
        chain = [CHAIN[0], CHAIN[1].model_copy(update=change)]
        assert broken(verify_chain(chain)) == (False, "hash_mismatch", 2)


def test_an_unreadable_stored_event_is_a_hash_mismatch() -> None:
    """A store raising ChainBrokenError mid-stream is reported at the next expected number."""

    def stream() -> Iterator[AuditEvent]:
        yield from CHAIN[:2]
        raise ChainBrokenError("unreadable audit row, seq 3")

    report = verify_chain(stream())
    assert broken(report) == (False, "hash_mismatch", 3)
    assert report.checked == 2


def test_an_empty_chain_against_a_digest() -> None:
    """An empty chain matches only the genesis digest (0, GENESIS_HASH)."""
    assert verify_chain([], expect_head=(0, GENESIS_HASH)).ok
    assert broken(verify_chain([], expect_head=HEAD)) == (False, "digest_mismatch", 8)


def test_verify_finds_tampering_in_an_in_memory_log() -> None:
    """Editing InMemoryAuditLog._chains directly is found by verify, at the edited seq."""
    log = InMemoryAuditLog()
    for n in range(5):
        log.append("t1", actor="a", kind="k", body={"n": n})
    log.append("t2", actor="a", kind="k", body={})
    chain = log._chains["t1"]
    chain[1] = chain[1].model_copy(update={"body": {"n": 42}})
    assert broken(verify(log, "t1")) == (False, "hash_mismatch", 2)
    assert verify(log, "t2").ok


# -- the event itself ---------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
json_bodies = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


@given(body=json_bodies, micro=st.integers(0, 999_999))
def test_fast_canonical_is_byte_identical_to_canonical_bytes(body: dict[str, Any], micro: int) -> None:
    """verify's encoder gives exactly canonical_bytes of the event's fields."""
    at = T0.replace(microsecond=micro)
    expected = canonical_bytes(
        {"tenant_id": "tü", "seq": 7, "at": format_at(at), "actor": "a\u2028", "kind": "k", "body": body}
    )
    assert fast_canonical("tü", 7, at, "a\u2028", "k", body) == expected


@given(body=json_bodies)
def test_an_event_survives_a_json_round_trip_with_its_hash(body: dict[str, Any]) -> None:
    """Any JSON body builds an event that still verifies after dump and reload."""
    event = AuditEvent.build("t1", 1, T0, "a", "k", body, GENESIS_HASH)
    reloaded = AuditEvent.model_validate_json(event.model_dump_json())
    assert reloaded == event
    assert verify_chain([reloaded]).ok


def test_stored_time_keeps_microseconds_and_utc() -> None:
    """Times are stored with six fractional digits and +00:00, and read back unchanged."""
    assert format_at(T0) == "2025-03-01T12:00:00.000000+00:00"
    assert datetime.fromisoformat(format_at(T0)) == T0


def test_other_offsets_are_converted_to_utc_and_naive_times_refused() -> None:
    """An aware time in another zone is stored as UTC; a naive time is refused."""
    paris = T0.astimezone(timezone(timedelta(hours=1)))
    assert AuditEvent.build("t", 1, paris, "a", "k", {}, GENESIS_HASH).at.utcoffset() == (timedelta(0))
    with pytest.raises(ValueError, match="timezone-aware"):
        AuditEvent.build("t", 1, T0.replace(tzinfo=None), "a", "k", {}, GENESIS_HASH)


def test_compute_hash_is_sha256_of_prev_and_canonical() -> None:
    """compute_hash is plain sha256 over the ASCII prev hash and the canonical bytes."""
    assert compute_hash(GENESIS_HASH, b"") == (
        "60e05bd1b195af2f94112fa7197a5c88289058840ce7c6df9693756bc6250f55"
    )
    assert CHAIN[0].hash == compute_hash(GENESIS_HASH, CHAIN[0].canonical())


# -- SQLite: tampering with the file directly ---------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[SqliteAuditLog, Path]]:
    """A SQLite log with six events for t1 and three for t2."""
    path = tmp_path / "audit.sqlite3"
    log = SqliteAuditLog(path)
    for n in range(6):
        log.append("t1", actor="agent", kind="note", body={"n": n})
    for n in range(3):
        log.append("t2", actor="agent", kind="note", body={"n": n})
    yield log, path
    log.close()


def sql(path: Path, statement: str, *params: Any) -> None:
    """Run one statement on the file behind the log's back, as an attacker with access would."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def insert_row(path: Path, event: AuditEvent) -> None:
    sql(
        path,
        "INSERT INTO audit_events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        event.tenant_id,
        event.seq,
        format_at(event.at),
        event.actor,
        event.kind,
        canonical_json(event.body),
        event.prev_hash,
        event.hash,
    )


@pytest.mark.parametrize(
    ("statement", "bad_seq"),
    [
        ("UPDATE audit_events SET body = '{\"n\":99}' WHERE tenant_id = 't1' AND seq = 4", 4),
        ("UPDATE audit_events SET actor = 'mallory' WHERE tenant_id = 't1' AND seq = 2", 2),
        (
            "UPDATE audit_events SET at = '2020-01-01T00:00:00.000000+00:00'"
            " WHERE tenant_id = 't1' AND seq = 5",
            5,
        ),
        ("UPDATE audit_events SET body = '{broken' WHERE tenant_id = 't1' AND seq = 3", 3),
        ("UPDATE audit_events SET hash = '" + "f" * 64 + "' WHERE tenant_id = 't1' AND seq = 6", 6),
    ],
    ids=["body", "actor", "at", "unreadable_body", "hash"],
)
def test_sql_updates_are_hash_mismatches(
    db: tuple[SqliteAuditLog, Path], statement: str, bad_seq: int
) -> None:
    """An UPDATE of any column of one row is found at that row's seq."""
    log, path = db
    sql(path, statement)
    assert broken(verify(log, "t1")) == (False, "hash_mismatch", bad_seq)
    assert verify(log, "t2").ok


def test_sql_delete_is_a_sequence_gap(db: tuple[SqliteAuditLog, Path]) -> None:
    """A DELETE of row 4 is found at 4."""
    log, path = db
    sql(path, "DELETE FROM audit_events WHERE tenant_id = 't1' AND seq = 4")
    assert broken(verify(log, "t1")) == (False, "sequence_gap", 4)


def test_sql_insert_with_renumbering_breaks_the_next_link(
    db: tuple[SqliteAuditLog, Path],
) -> None:
    """A linked forgery INSERTed as 4, later rows renumbered, is found at 5."""
    log, path = db
    (third,) = log.events("t1", after_seq=2, limit=1)
    (forged,) = make_chain(1, start=4, prev=third.hash, actor="mallory")
    sql(path, "UPDATE audit_events SET seq = -seq WHERE tenant_id = 't1' AND seq >= 4")
    sql(path, "UPDATE audit_events SET seq = 1 - seq WHERE tenant_id = 't1' AND seq < 0")
    insert_row(path, forged)
    assert broken(verify(log, "t1")) == (False, "prev_hash_mismatch", 5)


def test_sql_swap_of_two_rows_breaks_the_link(db: tuple[SqliteAuditLog, Path]) -> None:
    """Swapping the seqs of rows 3 and 4 is found at 3."""
    log, path = db
    sql(path, "UPDATE audit_events SET seq = -1 WHERE tenant_id = 't1' AND seq = 3")
    sql(path, "UPDATE audit_events SET seq = 3 WHERE tenant_id = 't1' AND seq = 4")
    sql(path, "UPDATE audit_events SET seq = 4 WHERE tenant_id = 't1' AND seq = -1")
    assert broken(verify(log, "t1")) == (False, "prev_hash_mismatch", 3)


def test_sql_move_to_another_tenant_is_found_there(db: tuple[SqliteAuditLog, Path]) -> None:
    """t1's row 6 moved to the end of t2 breaks t2 at 4; t1, truncated, needs its digest."""
    log, path = db
    head = log.head("t1")
    assert head is not None
    sql(path, "UPDATE audit_events SET tenant_id = 't2', seq = 4 WHERE tenant_id = 't1' AND seq = 6")
    assert broken(verify(log, "t2")) == (False, "prev_hash_mismatch", 4)
    assert verify(log, "t1").ok
    assert broken(verify(log, "t1", expect_head=(head.seq, head.hash))) == (
        False,
        "digest_mismatch",
        6,
    )


def test_sql_rewrite_with_recomputed_hashes_is_caught_by_the_digest(
    db: tuple[SqliteAuditLog, Path],
) -> None:
    """Rewriting rows 3..6 with valid hashes verifies, except against the exported head."""
    log, path = db
    head = log.head("t1")
    second = list(log.events("t1", limit=2))[-1]
    assert head is not None
    sql(path, "DELETE FROM audit_events WHERE tenant_id = 't1' AND seq >= 3")
    for event in make_chain(4, start=3, prev=second.hash, actor="mallory"):
        insert_row(path, event)
    assert verify(log, "t1").ok
    assert broken(verify(log, "t1", expect_head=(head.seq, head.hash))) == (
        False,
        "digest_mismatch",
        6,
    )


def test_sql_garbage_time_is_reported_not_raised(db: tuple[SqliteAuditLog, Path]) -> None:
    """A row whose time cannot be parsed is reported as hash_mismatch at its seq."""
    log, path = db
    sql(path, "UPDATE audit_events SET at = 'not a time' WHERE tenant_id = 't1' AND seq = 2")
    assert broken(verify(log, "t1")) == (False, "hash_mismatch", 2)


@given(
    tenant=st.text(max_size=8),
    actor=st.text(max_size=8),
    kind=st.text(max_size=8),
    seq=st.integers(min_value=1, max_value=10**12),
    body=st.dictionaries(
        st.text(max_size=6),
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
            max_leaves=8,
        ),
        max_size=4,
    ),
    offset_minutes=st.integers(min_value=-720, max_value=720),
)
def test_a_stores_fast_event_is_the_built_event(
    tenant: str, actor: str, kind: str, seq: int, body: dict[str, Any], offset_minutes: int
) -> None:
    """stored_event (what appends use) gives exactly AuditEvent.build's event, hash and body text."""
    at = (T0 + timedelta(microseconds=seq % 10**6)).astimezone(timezone(timedelta(minutes=offset_minutes)))
    prev = "ab" * 32
    built = AuditEvent.build(tenant, seq, at, actor, kind, body, prev)
    text, value = encoded = encode_body(body)
    fast = stored_event(tenant, seq, at, actor, kind, encoded, prev)
    assert fast == built and fast.hash == built.hash
    assert text == canonical_json(built.body) and value == built.body


def test_a_stores_fast_event_refuses_what_build_refuses() -> None:
    with pytest.raises(TypeError):
        encode_body(["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_body({"x": float("nan")})
    with pytest.raises(ValueError):
        stored_event("t", 1, T0.replace(tzinfo=None), "a", "k", encode_body({}), GENESIS_HASH)
    with pytest.raises(ValueError):
        stored_event("t", 0, T0, "a", "k", encode_body({}), GENESIS_HASH)
