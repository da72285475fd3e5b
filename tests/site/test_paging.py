"""sitekit.paging: keyset orders walk every row once, cursors refuse what the site did not
hand out, filters are declared once and read from query strings or qualifiers."""

from __future__ import annotations

import base64
import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Approval
from audit.models import AuditEvent
from sitekit.errors import InvalidCursorError
from sitekit.paging import Column, Filter, Keyset, Listing, Range, Span, flag, one_of, qualifiers, time_span

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

QUEUE = Listing(
    Keyset(Approval, Column("expires_at", nullable=True), "requested_at", "id"),
    Filter("tool"),
    Filter("high_impact", parse=flag),
)

CHAIN = Listing(
    Keyset(AuditEvent, "seq"),
    Filter("action", "kind"),
    Filter("actor"),
    Range("created", "at"),
    Filter("q", "kind", "actor", lookup="icontains"),
)


@pytest.fixture
def approvals() -> list[Approval]:
    """24 approvals with shared deadlines (some none) and shared request times: ties everywhere."""
    rows = [
        Approval(
            tenant_id="t1",
            run_id=f"r{i}",
            action_id="a1",
            agent="paper-trader",
            tool=("place_order", "transfer")[i % 2],
            arguments="{}",
            requested_at=START + timedelta(minutes=i % 3),
            expires_at=None if i % 4 == 0 else START + timedelta(hours=i % 3),
            high_impact=i % 5 == 0,
        )
        for i in range(24)
    ]
    return Approval.objects.bulk_create(rows)


@pytest.fixture
def chain() -> None:
    for seq in range(1, 13):
        AuditEvent.objects.create(
            tenant_id="t1",
            seq=seq,
            at=f"2026-01-{seq:02d}T00:00:00Z",
            actor=("alice", "bob", "system")[seq % 3],
            kind=("run.requested", "approval.decided")[seq % 2],
            body="{}",
            prev_hash="0" * 64,
            hash=f"{seq:064d}",
        )
    AuditEvent.objects.create(
        tenant_id="t2", seq=1, at="2026-01-01T00:00:00Z", actor="alice", kind="run.requested",
        body="{}", prev_hash="0" * 64, hash="1" * 64,
    )  # fmt: skip


def _walk(listing: Listing, rows, values=None, limit=5) -> list:
    seen, cursor = [], None
    for _ in range(100):
        page = listing.page(rows, values, cursor=cursor, limit=limit)
        assert page.first is (cursor is None)
        seen += page.rows
        cursor = page.next_cursor
        if cursor is None:
            return seen
    raise AssertionError("a cursor repeats a page")


def _queue_order(row: Approval, *, reverse: bool = False) -> tuple:
    """The queue's order in Python: deadline (none last, whichever the direction), request time, id."""
    sign = -1 if reverse else 1
    due = row.expires_at
    return (
        due is None,
        sign * due.timestamp() if due else 0,
        sign * row.requested_at.timestamp(),
        sign * row.pk,
    )


@pytest.mark.parametrize(("reverse", "limit"), list(itertools.product([False, True], [1, 2, 5, 50])))
def test_pages_reach_every_row_once_in_the_keyset_order_nulls_last_either_way(approvals, reverse, limit):
    """Following next_cursor visits every row once, in the order the keyset declares, NULLs last."""
    listing = QUEUE.reversed() if reverse else QUEUE
    seen = _walk(listing, Approval.objects.all(), limit=limit)
    assert [r.pk for r in seen] == [
        r.pk for r in sorted(approvals, key=lambda r: _queue_order(r, reverse=reverse))
    ]


def test_filters_narrow_every_page_and_a_page_is_one_query(approvals):
    """The values narrow the list; each page, however deep, reads the database once."""
    seen = _walk(QUEUE, Approval.objects.all(), {"tool": "transfer", "high_impact": None}, limit=4)
    assert {r.pk for r in seen} == {r.pk for r in approvals if r.tool == "transfer"}
    first = QUEUE.page(Approval.objects.all(), {"tool": "transfer"}, limit=4)
    with CaptureQueriesContext(connection) as queries:
        QUEUE.page(Approval.objects.all(), {"tool": "transfer"}, cursor=first.next_cursor, limit=4)
    assert len(queries) == 1
    with pytest.raises(KeyError):
        QUEUE.filtered(Approval.objects.all(), {"agent": "paper-trader"})  # not declared: a caller's bug


def _b64(value) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


GARBAGE = [
    "A",
    "!!!",
    "not a cursor",
    _b64(b"\xff\xfe"),
    _b64({"at": 1}),
    _b64([]),
    _b64(["2026-03-01T12:00:00+00:00", "2026-03-01T12:00:00+00:00"]),  # one value short
    _b64(["2026-03-01T12:00:00+00:00", "2026-03-01T12:00:00+00:00", 1, 2]),  # one too many
    _b64([None, None, 1]),  # requested_at is never NULL
    _b64([None, "2026-03-01T12:00:00", 1]),  # a naive time: not one this site wrote
    _b64([None, "yesterday", 1]),
    _b64([None, 20260301, 1]),
    _b64([None, "2026-03-01T12:00:00+00:00", True]),
    _b64([None, "2026-03-01T12:00:00+00:00", 0]),
    _b64([None, "2026-03-01T12:00:00+00:00", 2**63]),
    _b64([None, "2026-03-01T12:00:00+00:00", "1"]),
    _b64([None, "2026-03-01T12:00:00+00:00", [1]]),
    _b64([5, "2026-03-01T12:00:00+00:00", 1]),
    _b64([None, "0001-01-01T00:00:00+14:00", 1]),  # before the first UTC instant Python has
    _b64([None, "9999-12-31T23:59:59-14:00", 1]),  # after the last
]


@pytest.mark.parametrize("cursor", GARBAGE)
def test_a_cursor_the_site_did_not_hand_out_is_invalid_cursor(approvals, cursor):
    """Bad base64, bad JSON, the wrong count or type of values: InvalidCursorError, never a database error."""
    with pytest.raises(InvalidCursorError):
        QUEUE.page(Approval.objects.all(), cursor=cursor, limit=5)


def test_a_cursor_round_trips_and_a_null_key_is_kept(approvals):
    """A key with a NULL deadline and an aware time comes back as it went."""
    key = (None, START, 7)
    assert QUEUE.order.decode(QUEUE.order.encode(key)) == key
    assert QUEUE.order.decode(QUEUE.order.encode((START, START, 7))) == (START, START, 7)


def test_values_page_reads_what_page_reads_in_one_statement(chain):
    """The hand-written statement of an ascending one-column keyset gives the ORM's pages and cursors."""
    for limit, values in itertools.product([1, 5, 50], [{}, {"action": "run.requested"}, {"actor": "bob"}]):
        cursor, by_hand = None, []
        while True:
            with CaptureQueriesContext(connection) as queries:
                mine = CHAIN.values_page(
                    ("seq", "kind"), scope={"tenant_id": "t1"}, values=values, cursor=cursor, limit=limit
                )
            assert len(queries) == 1
            theirs = CHAIN.page(
                AuditEvent.objects.filter(tenant_id="t1").values("seq", "kind"),
                values,
                cursor=cursor,
                limit=limit,
            )
            assert (mine.rows, mine.next_cursor) == (theirs.rows, theirs.next_cursor)
            by_hand += mine.rows
            cursor = mine.next_cursor
            if cursor is None:
                break
        fields = {"kind" if name == "action" else name: value for name, value in values.items()}
        expected = AuditEvent.objects.filter(tenant_id="t1", **fields).order_by("seq")
        assert [r["seq"] for r in by_hand] == [e.seq for e in expected]
    with pytest.raises(ValueError, match="not an equality"):
        CHAIN.values_page(("seq",), scope={"tenant_id": "t1"}, values={"q": "run"}, limit=5)


def test_a_page_can_start_after_a_plain_key(chain):
    """``after`` positions a list whose API names its place plainly (the audit chain's after_seq)."""
    page = CHAIN.page(AuditEvent.objects.filter(tenant_id="t1"), after=(10,), limit=5)
    assert [e.seq for e in page.rows] == [11, 12] and page.next_cursor is None and not page.first
    back = CHAIN.reversed().page(AuditEvent.objects.filter(tenant_id="t1"), after=(4,), limit=2)
    assert [e.seq for e in back.rows] == [3, 2] and back.next_key == (2,)


def test_query_strings_are_parsed_leniently_by_each_filters_parse():
    """Unknown names and refused text are left out; what a filter accepts is its parsed value."""
    listing = Listing(
        Keyset(Approval, "id"),
        Filter("tool", parse=one_of(lambda: ["place_order"])),
        Filter("high_impact", parse=flag),
        Filter("run", "run_id"),
    )
    query = {"tool": "transfer", "high_impact": "1", "run": "  r1 ", "bogus": "1", "agent": "x"}
    assert listing.parse(query) == {"high_impact": True, "run": "r1"}
    assert listing.parse({"tool": "place_order", "high_impact": "yes", "run": "   "}) == {
        "tool": "place_order"
    }


def test_github_style_qualifiers_are_filters_declared_on_the_list(chain):
    """``action:``, ``actor:`` and ``created:`` ranges narrow the chain as declared; other words go to q."""

    def seqs(search: str) -> list[int]:
        values = CHAIN.parse(qualifiers(search))
        return [e.seq for e in CHAIN.page(AuditEvent.objects.filter(tenant_id="t1"), values, limit=50).rows]

    assert seqs("action:approval.decided actor:bob") == [1, 7]
    assert seqs("created:>=2026-01-10") == [10, 11, 12]
    assert seqs("created:<2026-01-03 actor:alice") == []
    assert seqs("created:2026-01-02T00:00:00Z..2026-01-04T00:00:00Z") == [2, 3, 4]
    assert seqs("created:*..2026-01-02T00:00:00Z") == [1, 2]
    assert seqs("created:2026-01-05T00:00:00Z") == [5]
    assert seqs("SYSTEM action:run.requested") == [2, 8]
    assert seqs("colour:red") == list(range(1, 13))  # not a qualifier of this list: no filter
    assert qualifiers("a:1 free words b:") == {"a": "1", "q": "free words b:"}


US = timedelta(microseconds=1)
MS = timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("text", "start", "width"),
    [
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC), timedelta(days=1)),
        ("2026-12-01T10", datetime(2026, 12, 1, 10, tzinfo=UTC), timedelta(hours=1)),
        ("2026-12-01T10:30", datetime(2026, 12, 1, 10, 30, tzinfo=UTC), timedelta(minutes=1)),
        ("2026-12-01 10:30:05", datetime(2026, 12, 1, 10, 30, 5, tzinfo=UTC), timedelta(seconds=1)),
        ("2026-12-01T10:30:05.25", datetime(2026, 12, 1, 10, 30, 5, 250_000, tzinfo=UTC), MS * 10),
        ("2026-12-01T10:30:05.000001Z", datetime(2026, 12, 1, 10, 30, 5, 1, tzinfo=UTC), US),
        ("2026-12-01T10:30+02:00", datetime(2026, 12, 1, 8, 30, tzinfo=UTC), timedelta(minutes=1)),
        ("2026-12-01T00:30-0100", datetime(2026, 12, 1, 1, 30, tzinfo=UTC), timedelta(minutes=1)),
    ],
)  # fmt: skip
def test_a_written_time_covers_as_much_as_its_precision(text, start, width):
    """A date is its UTC day, an hour its hour, down to the digits of a fraction; offsets move it to UTC."""
    assert time_span(text) == Span(start, start + width)


@pytest.mark.parametrize(
    "text",
    ["", "soon", "2026-13-01", "2026-02-30", "2026-12-01+02:00", "2026-12-01T24:00", "2026-12-01T10:30+24:00",
     "9999-12-31", "0001-01-01T00:00+14:00", "2026-12-01T10:30:05,5", "20261201"],
)  # fmt: skip
def test_a_time_that_is_not_one_is_a_value_error(text):
    """No such day, hour or offset, a stretch past year 9999, another spelling: ValueError, never a guess."""
    with pytest.raises(ValueError):
        time_span(text)


def test_a_range_of_spans_compares_whole_stretches(approvals):
    """``x``, ``<=x`` and ``x..y`` keep all of a day; ``>x`` starts after it, ``<x`` stops before it."""
    listing = Listing(Keyset(Approval, "id"), Range("requested", "requested_at", parse=time_span))
    first = START.replace(hour=0, minute=0)
    Approval.objects.filter(pk=approvals[0].pk).update(requested_at=first - timedelta(microseconds=1))
    Approval.objects.filter(pk=approvals[1].pk).update(requested_at=first + timedelta(days=1))

    def ids(search: str) -> set[int]:
        values = listing.parse(qualifiers(search))
        assert values, search
        return {a.pk for a in listing.page(Approval.objects.all(), values, limit=100).rows}

    everyone = {a.pk for a in approvals}
    that_day = everyone - {approvals[0].pk, approvals[1].pk}
    assert ids("requested:2026-03-01") == that_day
    assert ids("requested:<=2026-03-01") == that_day | {approvals[0].pk}
    assert ids("requested:>2026-03-01") == {approvals[1].pk}
    assert ids("requested:<2026-03-01") == {approvals[0].pk}
    assert ids("requested:>=2026-03-02") == {approvals[1].pk}
    assert ids("requested:2026-02-28..2026-03-01") == that_day | {approvals[0].pk}
    assert ids("requested:2026-03-01T12:01") == {a.pk for a in approvals[2:] if a.requested_at.minute == 1}


def test_qualifiers_named_by_the_list_leave_other_colons_as_text():
    """With ``names``, ``run-1:2`` stays a word of the free text (a run id may hold a colon)."""
    assert qualifiers("actor:bob r-1:2 kind:x", ["actor", "kind"]) == {
        "actor": "bob",
        "kind": "x",
        "q": "r-1:2",
    }
    assert qualifiers("actor:bob r-1:2") == {"actor": "bob", "r-1": "2"}
