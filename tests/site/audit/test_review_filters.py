"""The audit page's filters: each one, combined, kept in the URL, refused when bad, and
keyset pages in both directions that reach every event; only sequenced events, only the
tenant's own."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from audit import views
from audit.models import AuditEvent, PendingEvent
from audit.selectors import DECISION_KINDS
from keelgate.audit import format_at
from tenants.models import Membership, Role, Tenant

from .review_log import LOG, UNSEQUENCED_ACTOR, Spec, hold_sequencing, write_log

pytestmark = pytest.mark.django_db


@pytest.fixture
def log(operator, monkeypatch):
    """t1 holds LOG and three events a sequencer at work has not numbered yet; t2, where op
    is no member, holds LOG too."""
    hold_sequencing(monkeypatch)
    write_log("t1", unsequenced=3)
    Tenant.objects.create(slug="t2", name="T2")
    write_log("t2", unsequenced=3)


@pytest.fixture
def viewer(operator) -> Client:
    client = Client()
    client.force_login(operator.__class__.objects.get(username="viewer"))
    return client


def shown(client: Client, url: str, *, status: int = 200) -> list[int]:
    """The event numbers a page lists, in its order."""
    response = client.get(url)
    assert response.status_code == status, response.content[:2000]
    return [int(seq) for seq in re.findall(r'<tr id="ev-(\d+)"', response.content.decode())]


def newest_first(keep) -> list[int]:
    return [s.seq for s in reversed(LOG) if keep(s)]


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


FILTERS = [
    ("kind=approval.decided", lambda s: s.kind == "approval.decided"),
    ("actor=alice", lambda s: s.actor == "alice"),
    ("run=r-1", lambda s: s.run_id == "r-1"),
    ("tool=transfer", lambda s: s.tool == "transfer"),
    ("from=2026-12-02", lambda s: s.at >= day("2026-12-02")),
    ("to=2026-12-01", lambda s: s.at < day("2026-12-02")),  # the whole day, included
    ("from=2026-12-02T10:00&to=2026-12-02T14:00",
     lambda s: day("2026-12-02T10:00") <= s.at < day("2026-12-02T14:01")),
    ("from=2026-12-02T11:00%2B01:00", lambda s: s.at >= day("2026-12-02T10:00")),  # an offset
    ("q=r-3", lambda s: s.run_id == "r-3"),
    ("q=R-3", lambda s: s.run_id == "r-3"),  # text, found whatever its case
    ("q=actor:bob+kind:gateway.call", lambda s: s.actor == "bob" and s.kind == "gateway.call"),
    ("q=action:loop.reconciled", lambda s: s.kind == "loop.reconciled"),
    ("q=run:r-2+tool:place_order", lambda s: s.run_id == "r-2" and s.tool == "place_order"),
    ("q=created:2026-12-02", lambda s: day("2026-12-02") <= s.at < day("2026-12-03")),
    ("q=created:>=2026-12-02", lambda s: s.at >= day("2026-12-02")),
    ("q=created:>2026-12-02", lambda s: s.at >= day("2026-12-03")),  # after the whole day
    ("q=created:<=2026-12-01", lambda s: s.at < day("2026-12-02")),  # up to the day's end
    ("q=created:<2026-12-02", lambda s: s.at < day("2026-12-02")),
    ("q=created:2026-12-01..2026-12-02", lambda s: s.at < day("2026-12-03")),
    ("q=created:2026-12-02T04..*", lambda s: s.at >= day("2026-12-02T04:00")),
    ("q=created:2026-12-02T04:00", lambda s: s.at == day("2026-12-02T04:00")),  # that minute
    ("decisions=1", lambda s: s.kind in DECISION_KINDS),
    (
        "actor=alice&kind=approval.decided&from=2026-12-01T12:00&q=r-",
        lambda s: s.actor == "alice" and s.kind == "approval.decided"
        and s.at >= day("2026-12-01T12:00") and s.run_id,
    ),
    ("tool=transfer&q=created:<2026-12-03+run:r-4",
     lambda s: s.tool == "transfer" and s.run_id == "r-4" and s.at < day("2026-12-03")),
]  # fmt: skip


@pytest.mark.parametrize(("query", "keep"), FILTERS, ids=[q for q, _ in FILTERS])
def test_each_filter_and_their_combinations_keep_exactly_the_matching_events(log, viewer, query, keep):
    """The page lists, newest first, exactly t1's events the filters keep (not t2's, not unsequenced)."""
    expected = newest_first(keep)
    assert expected, "a filter that keeps nothing proves little"
    assert shown(viewer, f"/audit/t1/?{query}") == expected


def test_unsequenced_events_and_other_tenants_never_show(log, viewer):
    """The writer's unsequenced rows match every filter yet never list; t2's page is 404 for t1's viewer."""
    assert PendingEvent.objects.filter(tenant_id="t1").count() == 3
    page = viewer.get("/audit/t1/?run=r-1").content.decode()
    assert UNSEQUENCED_ACTOR not in page
    assert shown(viewer, f"/audit/t1/?actor={UNSEQUENCED_ACTOR}") == []
    assert viewer.get("/audit/t2/").status_code == 404
    assert viewer.get("/audit/t2/decisions/").status_code == 404
    assert viewer.get("/audit/t2/rows/").status_code == 404
    assert viewer.get("/audit/t2/events/1/").status_code == 404
    assert viewer.get("/audit/t2/checkpoints/").status_code == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("kind=Not+A+Kind", "kind"),
        ("run=%2Fslash", "run"),
        ("from=yesterday", "from"),
        ("to=2026-13-01", "to"),
        ("to=2026-12-01T10:30%2B25:00", "to"),
        ("from=9999-12-31", "from"),
        ("q=created:soon", "q"),
        ("q=created:2026-12-01..nope", "q"),
        ("q=kind:NOPE", "q"),
        ("q=actor:bob&actor=alice", "q"),
        ("decisions=maybe", "decisions"),
        ("before=-1", "before"),
        ("after=x", "after"),
        ("before=99999999999999999999", "before"),
        ("before=5&after=2", "after"),
        ("actor=" + "a" * 201, "actor"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field_and_lists_nothing(log, viewer, query, field):
    """Never a 500, never a silently wider list: the page says which field is wrong, and shows no event."""
    response = viewer.get(f"/audit/t1/?{query}")
    assert response.status_code == 400
    page = response.content.decode()
    assert f"<strong>{field}</strong>:" in page
    assert '<tr id="ev-' not in page and "No events" not in page
    assert viewer.get(f"/audit/t1/decisions/?{query}").status_code == 400
    assert viewer.get(f"/audit/t1/rows/?{query}").status_code == 400


def test_typed_values_are_kept_and_unknown_parameters_ignored(log, viewer):
    """The form shows what was typed (escaped); a parameter that is no filter (utm_source) changes nothing."""
    page = viewer.get('/audit/t1/?actor=alice&utm_source=mail&q="><b>x').content.decode()
    assert 'name="actor" value="alice"' in page
    assert "&quot;&gt;&lt;b&gt;x" in page and '"><b>x' not in page
    assert shown(viewer, "/audit/t1/?actor=alice&utm_source=mail") == newest_first(
        lambda s: s.actor == "alice"
    )


def _walk(client: Client, url: str, rel: str) -> list[int]:
    """Follow a page's ``rel`` link (next: older, prev: newer) until there is none."""
    seen: list[int] = []
    for _ in range(100):
        page = client.get(url).content.decode()
        seen += [int(seq) for seq in re.findall(r'<tr id="ev-(\d+)"', page)]
        link = re.search(rf'<a href="([^"]+)" rel="{rel}">', page)
        if link is None:
            return seen
        url = link.group(1).replace("&amp;", "&")
    raise AssertionError("no end of pages")


WALKS = [
    ("", lambda s: True),
    ("actor=bob", lambda s: s.actor == "bob"),
    ("q=r-+created:>=2026-12-01T06:00", lambda s: s.run_id and s.at >= day("2026-12-01T06:00")),
    ("decisions=1", lambda s: s.kind in DECISION_KINDS),
]


@pytest.mark.parametrize(("query", "keep"), WALKS, ids=[q or "all" for q, _ in WALKS])
def test_pages_reach_every_event_in_both_directions_keeping_the_filters(
    log, viewer, monkeypatch, query, keep
):
    """Older links walk from the newest match to the oldest, newer links back; none twice, none missed."""
    monkeypatch.setattr(views, "PAGE_SIZE", 4)
    matching = newest_first(keep)
    assert len(matching) > 8
    older = _walk(viewer, f"/audit/t1/?{query}", "next")
    assert older == matching
    oldest = matching[-1]
    newer = _walk(viewer, f"/audit/t1/?{query}&after={oldest - 1}", "prev")
    # Each newer page lists its events newest first: pages of four, from the oldest up.
    pages = [matching[::-1][i : i + 4] for i in range(0, len(matching), 4)]
    assert newer == [seq for chunk in pages for seq in reversed(chunk)]
    page = viewer.get(f"/audit/t1/?{query}&before={matching[3]}").content.decode()
    links = re.findall(r'<a href="(/audit/t1/\?[^"]*)" rel="(?:next|prev)">', page)
    assert len(links) == 2  # newer and older
    for link in links:
        for pair in filter(None, query.split("&")):
            assert f"{pair.split('=')[0]}=" in link, (link, pair)


def test_the_newest_page_is_live_and_a_positioned_page_is_not(log, viewer):
    """Only the newest page carries the live fragment's hooks, with the filters in its re-read URL."""
    newest = viewer.get("/audit/t1/?actor=alice").content.decode()
    assert 'data-live-tenant="t1"' in newest
    assert 'hx-get="/audit/t1/rows/?actor=alice"' in newest
    assert 'data-since="{&quot;t1&quot;: 30}"' in newest
    deep = viewer.get("/audit/t1/?actor=alice&before=20").content.decode()
    assert "data-live-refresh" not in deep
    rows = viewer.get("/audit/t1/rows/?actor=alice")
    assert rows.status_code == 200 and "<html" not in rows.content.decode()
    assert [int(s) for s in re.findall(r'<tr id="ev-(\d+)"', rows.content.decode())] == newest_first(
        lambda s: s.actor == "alice"
    )


def test_a_bare_date_covers_its_whole_day_to_the_microsecond(operator, viewer):
    """Events at a day's first and last microsecond belong to it; the next day's first does not."""
    edges = [
        Spec(1, datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC), "a", "run.status", "", ""),
        Spec(2, datetime(2026, 12, 1, tzinfo=UTC), "a", "run.status", "", ""),
        Spec(3, datetime(2026, 12, 1, 23, 59, 59, 999999, tzinfo=UTC), "a", "run.status", "", ""),
        Spec(4, datetime(2026, 12, 2, tzinfo=UTC), "a", "run.status", "", ""),
    ]
    write_log("t1", edges)
    assert format_at(edges[2].at) == "2026-12-01T23:59:59.999999+00:00"
    assert shown(viewer, "/audit/t1/?q=created:2026-12-01") == [3, 2]
    assert shown(viewer, "/audit/t1/?q=created:<=2026-12-01") == [3, 2, 1]
    assert shown(viewer, "/audit/t1/?q=created:>2026-12-01") == [4]
    assert shown(viewer, "/audit/t1/?q=created:<2026-12-01") == [1]
    assert shown(viewer, "/audit/t1/?from=2026-12-01&to=2026-12-01") == [3, 2]
    assert shown(viewer, "/audit/t1/?to=2026-12-01T23:59:59.999999") == [3, 2, 1]
    assert shown(viewer, "/audit/t1/?from=2026-12-02T01:00%2B01:00") == [4]  # 00:00 UTC


def test_a_member_of_two_tenants_sees_each_log_under_its_own_name(log, operator):
    """op in t1 and t2: each tenant's page lists that tenant's events only (t2's run r-1 is not t1's)."""
    Membership.objects.create(user=operator, tenant=Tenant.objects.get(slug="t2"), role=Role.VIEWER)
    AuditEvent.objects.filter(tenant_id="t2").update(actor="t2-person")
    client = Client()
    client.force_login(operator)
    assert shown(client, "/audit/t1/?run=r-1") == newest_first(lambda s: s.run_id == "r-1")
    assert "t2-person" not in client.get("/audit/t1/?run=r-1").content.decode()
    assert "t2-person" in client.get("/audit/t2/?run=r-1").content.decode()


def test_time_bounds_compare_as_times_not_as_the_text_typed(operator, viewer):
    """``from`` at +01:00 and a bare hour find the same events as their UTC spelling (the column is text)."""
    write_log("t1", LOG[:6])  # 00:00 to 10:00 on Dec 1
    utc = shown(viewer, "/audit/t1/?from=2026-12-01T04:00Z")
    assert utc == [6, 5, 4, 3] == shown(viewer, "/audit/t1/?from=2026-12-01T05:00%2B01:00")
    assert shown(viewer, "/audit/t1/?q=created:2026-12-01T04") == [3]


def test_a_refused_shape_is_said_in_words(log, viewer):
    """A kind or run id of the wrong shape is explained, not quoted as a regular expression."""
    page = viewer.get("/audit/t1/?kind=X&run=%2Fr&actor=nul%00").content.decode()
    assert "Not an event kind (lowercase words and dots, such as loop.reconciled)." in page
    assert "Not a run id" in page and "Must not contain NUL characters." in page
    assert "^[a-z]" not in page
