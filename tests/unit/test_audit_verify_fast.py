"""Verifying stored rows (``verify_rows``) reports exactly what ``verify_chain`` does.

``verify(log, ...)`` on a SQLite log hashes the stored text instead of rebuilding
events. Every case here compares it with ``verify_chain(log.events(...))`` over the
same file, tampered behind the log's back with a separate connection.
"""

from __future__ import annotations

import hashlib
import json
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
    StoredRow,
    format_at,
    in_stored_form,
    page_in_stored_form,
    verify,
    verify_chain,
    verify_rows,
)
from keelgate.canonical import canonical_json
from keelgate.errors import ChainBrokenError
from keelgate.testing import FrozenClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)

BODIES: list[dict[str, Any]] = [
    {"n": 0},
    {
        "text": 'quote " backslash \\ newline \n nul \x00 sep \u2028 é 🙂 /',
        "list": [1, 2.5, -0.0, None, True],
    },
    {"nested": {"b": [], "a": {}}, "big": 10**30, "small": 1e-7},
    {},
    {"z": "last", "n": 4, "a": "first"},
    {"n": 5},
]
ACTORS = ["agent", 'ma"ll\\ory\n', "agent", "\u2028\x1f", "agent", "agent"]


def broken(report: ChainReport) -> tuple[bool, str | None, int | None]:
    return report.ok, report.reason, report.first_bad_seq


@pytest.fixture(params=[None, 4], ids=["one_page", "pages_of_4"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SqliteAuditLog, Path]]:
    """Six awkward t1 events (escapes, floats, nesting) and three t2 events, whole seconds apart.

    ``pages_of_4`` shrinks both the store's and the verifier's page so chains span pages.
    """
    if request.param is not None:
        mp = pytest.MonkeyPatch()
        # White-box: the page sizes are internal, so they are patched by name, not imported.
        mp.setattr("keelgate.audit._sqlite._PAGE", request.param)
        mp.setattr("keelgate.audit._verify._PAGE", request.param)
        request.addfinalizer(mp.undo)
    path = tmp_path / "audit.sqlite3"
    clock = FrozenClock(T0)
    log = SqliteAuditLog(path, clock=clock)
    for actor, body in zip(ACTORS, BODIES, strict=True):
        log.append("t1", actor=actor, kind="note", body=body)
        clock.advance(1)
    for n in range(3):
        log.append("t2", actor="agent", kind="note", body={"n": n})
        clock.advance(1)
    yield log, path
    log.close()


def sql(path: Path, statement: str, *params: Any) -> None:
    """One statement on the file behind the log's back."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def stored(path: Path, tenant: str, seq: int) -> StoredRow:
    conn = sqlite3.connect(path)
    try:
        row: StoredRow = conn.execute(
            "SELECT tenant_id, seq, at, actor, kind, body, prev_hash, hash FROM audit_events"
            " WHERE tenant_id = ? AND seq = ?",
            (tenant, seq),
        ).fetchone()
    finally:
        conn.close()
    return row


def set_column(path: Path, seq: int, column: str, value: Any, tenant: str = "t1") -> None:
    sql(path, f"UPDATE audit_events SET {column} = ? WHERE tenant_id = ? AND seq = ?", value, tenant, seq)


def raw_hash(row: tuple[Any, ...]) -> str:
    """The hash of a row's stored text taken as it is: what a forger who read the verifier computes."""
    tenant, seq, at, actor, kind, body, prev, _ = row
    text = (
        f'{{"actor":{json.dumps(actor, ensure_ascii=False)},"at":{json.dumps(at)},"body":{body},'
        f'"kind":{json.dumps(kind, ensure_ascii=False)},"seq":{seq},'
        f'"tenant_id":{json.dumps(tenant, ensure_ascii=False)}}}'
    )
    return hashlib.sha256((prev + text).encode()).hexdigest()


def both(
    log: SqliteAuditLog, tenant: str = "t1", expect_head: tuple[int, str] | None = None
) -> tuple[ChainReport, ChainReport]:
    """(the fast path's report, verify_chain's report over events()) for one chain."""
    fast = verify(log, tenant, expect_head=expect_head)
    assert fast == verify_rows(log.rows(tenant), tenant_id=tenant, expect_head=expect_head)
    old = verify_chain(log.events(tenant), tenant_id=tenant, expect_head=expect_head)
    return fast, old


# -- untouched chains ----------------------------------------------------------------------


def test_a_clean_chain_gives_the_same_report(db: tuple[SqliteAuditLog, Path]) -> None:
    """Both tenants verify in full, with the same head, on either path."""
    log, _ = db
    for tenant, n in (("t1", 6), ("t2", 3)):
        fast, old = both(log, tenant)
        assert fast == old
        head = log.head(tenant)
        assert head is not None
        assert fast == ChainReport(True, n, n, head.hash, None, None)


def test_exported_heads_give_the_same_report(db: tuple[SqliteAuditLog, Path]) -> None:
    """Matching, wrong, genesis and past-the-end digests, and an empty chain, agree."""
    log, _ = db
    third = list(log.events("t1", limit=3))[-1]
    for head in [(3, third.hash), (3, "f" * 64), (0, GENESIS_HASH), (9, third.hash), (0, "f" * 64)]:
        for tenant in ("t1", "nobody"):
            fast, old = both(log, tenant, expect_head=head)
            assert fast == old, (tenant, head)
    assert broken(both(log, "t1", expect_head=(3, "f" * 64))[0]) == (False, "digest_mismatch", 3)


# -- tampering both paths see alike --------------------------------------------------------


def utc_plus_one(path: Path) -> str:
    """Row 3's time, same instant, written with a +01:00 offset."""
    at = datetime.fromisoformat(stored(path, "t1", 3)[2]).astimezone(timezone(timedelta(hours=1)))
    return format_at(at)


Edit = str | tuple[int, str, Any]
"""A SQL statement, or ``(seq, column, value)`` for a t1 row; a callable value gets the path."""

DELETE_4 = "DELETE FROM audit_events WHERE tenant_id = 't1' AND seq = 4"
DELETE_3 = "DELETE FROM audit_events WHERE tenant_id = 't1' AND seq = 3"
F64 = "f" * 64

TAMPERING: list[tuple[str, list[Edit], tuple[str, int]]] = [
    # (id, edits, (reason, first_bad_seq)) -- the same on both paths.
    ("body", [(4, "body", '{"n":99}')], ("hash_mismatch", 4)),
    ("actor", [(2, "actor", "mallory")], ("hash_mismatch", 2)),
    ("kind", [(2, "kind", "other")], ("hash_mismatch", 2)),
    ("at", [(5, "at", "2020-01-01T00:00:00.000000+00:00")], ("hash_mismatch", 5)),
    ("at_non_utc", [(3, "at", utc_plus_one)], ("hash_mismatch", 3)),
    ("at_naive", [(3, "at", lambda p: stored(p, "t1", 3)[2][:-6])], ("hash_mismatch", 3)),
    ("at_garbage", [(2, "at", "not a time")], ("hash_mismatch", 2)),
    ("at_hour_24", [(2, "at", "2026-01-01T24:00:01.000000+00:00")], ("hash_mismatch", 2)),
    ("at_blob", [(2, "at", lambda p: stored(p, "t1", 2)[2].encode())], ("hash_mismatch", 2)),
    ("body_unreadable", [(3, "body", "{broken")], ("hash_mismatch", 3)),
    ("body_nan", [(3, "body", '{"n":NaN}')], ("hash_mismatch", 3)),
    ("body_trailing", [(3, "body", lambda p: stored(p, "t1", 3)[5] + "x")], ("hash_mismatch", 3)),
    ("body_blob_garbage", [(3, "body", b"\xff{")], ("hash_mismatch", 3)),
    ("actor_blob", [(1, "actor", b"agent")], ("hash_mismatch", 1)),
    ("hash", [(6, "hash", F64)], ("hash_mismatch", 6)),
    ("prev_hash", [(4, "prev_hash", F64)], ("prev_hash_mismatch", 4)),
    ("seq_real", [(3, "seq", 3.5)], ("hash_mismatch", 3)),
    ("seq_text", [(3, "seq", "x")], ("sequence_gap", 3)),
    ("delete", [DELETE_4], ("sequence_gap", 4)),
    ("swap", [(3, "seq", -1), (4, "seq", 3), (-1, "seq", 4)], ("prev_hash_mismatch", 3)),
    # An unreadable row is reported as such before its number or link is looked at.
    ("unreadable_after_a_gap", [DELETE_3, (4, "body", "{broken")], ("hash_mismatch", 3)),
    ("unreadable_with_a_bad_link", [(4, "prev_hash", F64), (4, "body", "[")], ("hash_mismatch", 4)),
    ("bad_link_then_unreadable", [(4, "prev_hash", F64), (5, "body", "[")], ("prev_hash_mismatch", 4)),
]


def apply(path: Path, edits: list[Edit]) -> None:
    for edit in edits:
        if isinstance(edit, str):
            sql(path, edit)
        else:
            seq, column, value = edit
            set_column(path, seq, column, value(path) if callable(value) else value)


@pytest.mark.parametrize(("edits", "expected"), [c[1:] for c in TAMPERING], ids=[c[0] for c in TAMPERING])
def test_tampering_gives_the_same_report(
    db: tuple[SqliteAuditLog, Path], edits: list[Edit], expected: tuple[str, int]
) -> None:
    """Each edit of the file is reported identically, at the same number, by both paths."""
    log, path = db
    apply(path, edits)
    fast, old = both(log)
    assert fast == old
    assert broken(fast) == (False, *expected)
    assert both(log, "t2")[0].ok


def test_a_row_moved_to_another_tenant_gives_the_same_reports(db: tuple[SqliteAuditLog, Path]) -> None:
    """t1's row 6 appended to t2 breaks t2's link; truncated t1 needs its digest, on both paths."""
    log, path = db
    head = log.head("t1")
    assert head is not None
    sql(path, "UPDATE audit_events SET tenant_id = 't2', seq = 4 WHERE tenant_id = 't1' AND seq = 6")
    fast, old = both(log, "t2")
    assert fast == old
    assert broken(fast) == (False, "prev_hash_mismatch", 4)
    fast, old = both(log, "t1", expect_head=(head.seq, head.hash))
    assert fast == old
    assert broken(fast) == (False, "digest_mismatch", 6)


def test_wrong_tenant_rows_give_the_same_report() -> None:
    """Rows of another tenant, named or inferred from the first, are wrong_tenant on both paths."""
    log = InMemoryAuditLog()
    for tenant in ("t1", "t2"):
        for n in range(3):
            log.append(tenant, actor="a", kind="k", body={"n": n})
    events = [*list(log.events("t1"))[:2], list(log.events("t2"))[2]]
    rows = [as_row(event) for event in events]
    for tenant_id in ("t1", None, "t2"):
        assert verify_rows(rows, tenant_id=tenant_id) == verify_chain(events, tenant_id=tenant_id)
    assert broken(verify_rows(rows)) == (False, "wrong_tenant", 3)


# -- rewritten rows with their hash recomputed ---------------------------------------------


def forge(path: Path, seq: int, **columns: Any) -> None:
    """Rewrite row ``seq`` of t1 and recompute its hash over its stored text as it is."""
    names = ["tenant_id", "seq", "at", "actor", "kind", "body", "prev_hash", "hash"]
    row = dict(zip(names, stored(path, "t1", seq), strict=True)) | columns
    digest = raw_hash(tuple(row[name] for name in names))
    for column, value in [*columns.items(), ("hash", digest)]:
        set_column(path, seq, column, value)


def test_a_rehashed_canonical_forgery_verifies_on_both_paths(db: tuple[SqliteAuditLog, Path]) -> None:
    """A last row rewritten canonically, hash and all, links up: only a digest catches it."""
    log, path = db
    forge(path, 6, body='{"n":666}', at=format_at(T0.astimezone(timezone(timedelta(hours=-5)))))
    fast, old = both(log)
    assert fast == old
    assert fast.ok


@pytest.mark.parametrize(
    "columns",
    [
        {"body": '{"n": 5}'},
        {"body": '{"b":1,"a":2}'},
        {"body": "not json"},
        {"body": '{"n":5} '},
        {"at": "2026-01-01T00:00:05Z"},
        {"at": "2026-01-01 00:00:05.000000+00:00"},
        {"at": "yesterday"},
    ],
    ids=["spaced", "unsorted", "garbage", "trailing_space", "z_time", "space_separator", "garbage_time"],
)
def test_a_rehashed_forgery_over_text_append_never_writes_is_refused_by_both(
    db: tuple[SqliteAuditLog, Path], columns: dict[str, str]
) -> None:
    """Text hashed as it stands but not as append would store it fails at that row, on both paths."""
    log, path = db
    forge(path, 6, **columns)
    fast, old = both(log)
    assert fast == old
    assert broken(fast) == (False, "hash_mismatch", 6)


# -- text that reads back as the hashed value but is not the hashed text -------------------

NOT_AS_STORED = [
    ("spaced_body", 1, "body", lambda text: text.replace(":", ": ")),
    ("reordered_keys", 5, "body", lambda text: '{"z":"last","n":4,"a":"first"}'),
    ("escaped_slash", 2, "body", lambda text: text.replace("/", "\\/")),
    ("unicode_escape", 2, "body", lambda text: text.replace("é", "\\u00e9")),
    ("float_written_long", 2, "body", lambda text: text.replace("2.5", "2.50")),
    ("body_as_blob", 1, "body", lambda text: text.encode()),
    ("at_without_microseconds", 4, "at", lambda text: text.replace(".000000", "")),
    ("at_z", 4, "at", lambda text: text.replace("+00:00", "Z")),
    ("at_space_separator", 4, "at", lambda text: text.replace("T", " ")),
    ("at_minus_zero", 4, "at", lambda text: text.replace("+00:00", "-00:00")),
]


@pytest.mark.parametrize(
    ("seq", "column", "rewrite"), [c[1:] for c in NOT_AS_STORED], ids=[c[0] for c in NOT_AS_STORED]
)
def test_text_not_as_stored_is_a_hash_mismatch(
    db: tuple[SqliteAuditLog, Path], seq: int, column: str, rewrite: Any
) -> None:
    """Same value, other text, hash untouched: verify refuses it, at that row.

    The verifier must not accept bytes other than those hashed, even when they parse
    to the hashed value.
    """
    log, path = db
    index = ["tenant_id", "seq", "at", "actor", "kind", "body"].index(column)
    set_column(path, seq, column, rewrite(stored(path, "t1", seq)[index]))
    assert broken(verify(log, "t1")) == (False, "hash_mismatch", seq)


@pytest.mark.parametrize(
    ("seq", "column", "rewrite"), [c[1:] for c in NOT_AS_STORED], ids=[c[0] for c in NOT_AS_STORED]
)
def test_text_not_as_stored_gives_the_same_report(
    db: tuple[SqliteAuditLog, Path], seq: int, column: str, rewrite: Any
) -> None:
    """Text that means the same but is not what was hashed: both paths call it broken."""
    log, path = db
    index = ["tenant_id", "seq", "at", "actor", "kind", "body"].index(column)
    set_column(path, seq, column, rewrite(stored(path, "t1", seq)[index]))
    fast, old = both(log)
    assert fast == old


# -- the row source ------------------------------------------------------------------------


def test_rows_are_the_stored_columns_in_order(db: tuple[SqliteAuditLog, Path]) -> None:
    """rows() yields each event's stored text, oldest first, after ``after_seq``."""
    log, _ = db
    events = list(log.events("t1"))
    assert [as_row(event) for event in events] == list(log.rows("t1"))
    assert [row[1] for row in log.rows("t1", after_seq=4)] == [5, 6]
    assert list(log.rows("nobody")) == []


def test_rows_does_not_hold_the_lock_between_rows(tmp_path: Path) -> None:
    """The same thread can append while a rows() iteration is suspended (a held lock would hang)."""
    with SqliteAuditLog(tmp_path / "a.sqlite3") as log:
        log.append("t1", actor="a", kind="k", body={})
        rows = log.rows("t1")
        next(rows)
        log.append("t1", actor="a", kind="k", body={})
        assert list(rows) == []


def test_a_source_raising_chain_broken_is_a_hash_mismatch() -> None:
    """As with verify_chain, a row source that raises ChainBrokenError breaks at the next number."""
    log = InMemoryAuditLog()
    for n in range(3):
        log.append("t1", actor="a", kind="k", body={"n": n})
    events = list(log.events("t1"))

    def source() -> Iterator[StoredRow]:
        yield from (as_row(event) for event in events[:2])
        raise ChainBrokenError("unreadable audit row, seq 3")

    report = verify_rows(source())
    assert broken(report) == (False, "hash_mismatch", 3)
    assert report.checked == 2


def test_verify_uses_rows_only_when_a_log_has_them(tmp_path: Path) -> None:
    """A log with rows() is verified from them; one without falls back to events()."""
    inner = InMemoryAuditLog()
    inner.append("t1", actor="a", kind="k", body={})

    class RowsOnly:
        def events(self, tenant_id: str) -> Iterator[AuditEvent]:
            raise AssertionError("events() read although rows() exists")

        def rows(self, tenant_id: str) -> Iterator[StoredRow]:
            return (as_row(event) for event in inner.events(tenant_id))

    assert verify(RowsOnly(), "t1").ok  # type: ignore[arg-type]
    assert verify(inner, "t1").ok


# -- the stored-form checks ----------------------------------------------------------------


def as_row(event: AuditEvent) -> StoredRow:
    """An event as SqliteAuditLog stores it."""
    return (
        event.tenant_id,
        event.seq,
        format_at(event.at),
        event.actor,
        event.kind,
        canonical_json(event.body),
        event.prev_hash,
        event.hash,
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
json_bodies = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
_offsets = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(seconds=-61))]
times = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.sampled_from(_offsets)
)


@given(
    tenant=st.text(max_size=6),
    actor=st.text(max_size=6),
    kind=st.text(max_size=6),
    body=json_bodies,
    at=times,
)
def test_rows_of_any_event_verify_like_the_event(
    tenant: str, actor: str, kind: str, body: dict[str, Any], at: datetime
) -> None:
    """The bytes put together from stored text are the bytes the event was hashed over."""
    first = AuditEvent.build(tenant, 1, at, actor, kind, body, GENESIS_HASH)
    second = AuditEvent.build(tenant, 2, at, kind, actor, {"again": body}, first.hash)
    report = verify_rows([as_row(first), as_row(second)], tenant_id=tenant)
    assert report == verify_chain([first, second], tenant_id=tenant)
    assert report.ok


def reference_in_stored_form(at_text: object, body_text: object) -> bool:
    """The definition: the text is what format_at and canonical_json write for what it parses to."""
    try:
        at = datetime.fromisoformat(at_text)  # type: ignore[arg-type]
        body = json.loads(body_text)  # type: ignore[arg-type]
        return at.tzinfo is not None and format_at(at) == at_text and canonical_json(body) == body_text
    except (TypeError, ValueError):
        return False


def at_texts() -> st.SearchStrategy[str]:
    stored_text = times.map(format_at)
    return st.one_of(
        stored_text,
        stored_text.map(lambda t: t.replace("+00:00", "Z")),
        stored_text.map(lambda t: t.replace(".", ",")),
        stored_text.map(lambda t: t[:-6]),
        stored_text.map(lambda t: t.replace("T", " ")),
        stored_text.map(lambda t: t[:19] + t[26:]),
        st.sampled_from(
            [
                "2026-02-29T00:00:00.000000+00:00",
                "2024-02-29T23:59:59.999999+00:00",
                "2026-01-01T24:00:00.000000+00:00",
                "2026-01-01T00:00:00.000000+00:00:00",
                "2026-01-01T00:00:00.000000-00:00",
                "2026-01-01T00:00:00.000000+00:00\n2026-01-01T00:00:00.000000+00:00",
                "٢٠٢٦-01-01T00:00:00.000000+00:00",
                "",
            ]
        ),
        st.text(max_size=40),
    )


def body_texts() -> st.SearchStrategy[Any]:
    return st.one_of(
        json_bodies.map(canonical_json),
        json_bodies.map(json.dumps),
        json_bodies.map(lambda b: json.dumps(b, separators=(",", ":"), ensure_ascii=False)),
        json_values.map(canonical_json),
        st.sampled_from(["", "{", "]", "[1],[2", '{"a":1},{"b":2}', "NaN", "-0", "1.50", '"\\/"', "{} "]),
        st.text(max_size=20),
        json_bodies.map(lambda b: canonical_json(b).encode()),
    )


@given(at=at_texts(), body=body_texts())
def test_in_stored_form_is_the_definition(at: str, body: Any) -> None:
    """in_stored_form agrees with re-encoding through format_at and canonical_json."""
    assert in_stored_form(at, body) == reference_in_stored_form(at, body)


utc_at_texts = st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)).map(
    lambda at: format_at(at.replace(tzinfo=UTC))
)


@given(
    pairs=st.lists(
        st.tuples(
            st.one_of(utc_at_texts, utc_at_texts, at_texts()),
            st.one_of(json_values.map(canonical_json), body_texts()),
        ),
        max_size=6,
    )
)
def test_a_page_passes_only_if_every_row_does(pairs: list[tuple[str, Any]]) -> None:
    """The batch check never passes a page with a row the one-row check refuses."""
    ats = [at for at, _ in pairs]
    bodies = [body for _, body in pairs]
    if page_in_stored_form(ats, bodies):
        assert all(reference_in_stored_form(at, body) for at, body in pairs)


@given(bodies=st.lists(json_values.map(canonical_json), min_size=1, max_size=6))
def test_a_page_of_utc_times_and_canonical_bodies_passes(bodies: list[str]) -> None:
    """What append writes passes the batch check, so the common case takes the fast road."""
    ats = [format_at(T0 + timedelta(microseconds=7 * i)) for i in range(len(bodies))]
    assert page_in_stored_form(ats, bodies)


def test_shifted_bodies_cannot_pass_as_a_page() -> None:
    """Two broken bodies that join into valid JSON are refused: each must be its own value."""
    ats = [format_at(T0)] * 2
    assert not page_in_stored_form(ats, ['{"a":[1', '2]},{"b":1}'])
    assert not page_in_stored_form(ats, ["[1]", "[2"])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("actor", b"\xff\xfe"),  # stored as TEXT that is not UTF-8: sqlite3 cannot even fetch it
        ("body", b'{"n":"\xff"}'),
        ("body", "[" * 100_000 + "]" * 100_000),  # nested past Python's recursion limit
    ],
    ids=["actor_not_utf8", "body_not_utf8", "body_nested_too_deep"],
)
def test_a_row_that_cannot_be_read_is_a_broken_link_not_a_crash(
    db: tuple[SqliteAuditLog, Path], column: str, value: Any
) -> None:
    """Both paths report the row as a hash_mismatch at its seq and never raise."""
    log, path = db
    if isinstance(value, bytes):
        sql(
            path,
            f"UPDATE audit_events SET {column} = CAST(? AS TEXT) WHERE tenant_id = 't1' AND seq = 5",
            value,
        )
    else:
        set_column(path, 5, column, value)
    fast, old = both(log)
    assert broken(fast) == broken(old) == (False, "hash_mismatch", 5)
    assert verify(log, "t2").ok  # another tenant's chain is untouched
