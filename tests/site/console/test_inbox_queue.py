"""The inbox as a work queue: its order, its filters, keyset pages that reach every item."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest

from approvals.models import Approval, UnknownOutcome
from approvals.queue import PAGE_SIZE, InboxFilter

from .conftest import start_waiting

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime.now(UTC)


def make_approvals(n: int, *, tenant: str = "t1", start: int = 0, **fields) -> list[Approval]:
    """``n`` pending approval rows, the first requested longest ago (rows only: the queue reads rows)."""
    rows = [
        Approval(
            tenant_id=tenant,
            run_id=f"q{start + i}",
            action_id="a1",
            agent=fields.get("agent", "paper-trader"),
            tool=fields.get("tool", "place_order"),
            arguments="{}",
            requested_at=NOW - timedelta(hours=n - i),
            expires_at=fields.get("expires_at"),
            high_impact=fields.get("high_impact", False),
        )
        for i in range(n)
    ]
    return Approval.objects.bulk_create(rows)


def card_ids(html: str, kind: str = "a") -> list[int]:
    return [int(pk) for pk in re.findall(rf'id="item-{kind}-(\d+)"', html)]


def next_link(html: str, rel_label: str) -> str | None:
    found = re.search(rf'href="\?([^"]*)" rel="next">Next \d+ {rel_label}', html)
    return unescape(found.group(1)) if found else None


def test_unknown_outcomes_come_before_approvals_and_the_header_names_the_oldest_wait(
    people, as_user, brokerage_path
):
    """The stuck runs first; the header says how long the longest wait has been."""
    make_approvals(2)
    UnknownOutcome.objects.create(
        tenant_id="t1",
        run_id="u1",
        action_id="a1",
        agent="paper-trader",
        tool="place_order",
        arguments="{}",
        idempotency_key="k",
        detected_at=NOW - timedelta(minutes=5),
    )
    html = as_user("op").get("/").content.decode()
    assert html.index('id="h-unknown"') < html.index('id="h-approvals"')
    assert "1</strong> unknown outcome and <strong>2</strong> approvals waiting" in html
    assert "the oldest has waited" in html and "2\xa0hours" in html


def test_approvals_are_ordered_by_expiry_soonest_first_then_by_age(people, as_user):
    """A deadline outranks age; among equals (or no deadline) the oldest comes first."""
    old, young = make_approvals(2)
    late = make_approvals(1, start=10, expires_at=NOW + timedelta(hours=2))[0]
    soon = make_approvals(1, start=20, expires_at=NOW + timedelta(minutes=5))[0]
    html = as_user("op").get("/").content.decode()
    assert card_ids(html) == [soon.pk, late.pk, old.pk, young.pk]


def test_keyset_pages_reach_every_approval_once(people, as_user):
    """Following "Next" from the first page visits all of them, in order, with no repeat."""
    rows = make_approvals(PAGE_SIZE * 2 + 7)
    rows += make_approvals(5, start=500, expires_at=NOW + timedelta(minutes=1))
    client = as_user("op")
    seen: list[int] = []
    query: str | None = ""
    pages = 0
    while query is not None:
        html = client.get(f"/?{query}").content.decode()
        seen += card_ids(html)
        query = next_link(html, "approvals")
        pages += 1
    assert pages == 3
    assert sorted(seen) == sorted(r.pk for r in rows) and len(seen) == len(set(seen))
    assert seen[:5] == [r.pk for r in rows[-5:]]  # the deadlines first
    assert "First page" in html


def test_filters_narrow_both_sections_and_pages_keep_them(people, as_user):
    """Agent, tool and run narrow the list; the next page's link keeps the filter."""
    make_approvals(PAGE_SIZE + 3, tool="place_order")
    other = make_approvals(2, start=900, tool="transfer")
    client = as_user("op")
    html = client.get("/", {"tool": "transfer"}).content.decode()
    assert card_ids(html) == [r.pk for r in other]
    assert "Filtered: 0 unknown outcomes and 2 approvals match" in html
    html = client.get("/", {"tool": "place_order"}).content.decode()
    assert "tool=place_order" in next_link(html, "approvals")
    one = client.get("/", {"run": other[0].run_id}).content.decode()
    assert card_ids(one) == [other[0].pk]


def test_a_filtered_page_asks_its_socket_for_the_same_filter_and_page(people, as_user):
    """The websocket URL carries the page's filter and cursor, so live items match what is shown."""
    html = as_user("op").get("/", {"tool": "transfer", "high_impact": "1"}).content.decode()
    assert 'ws-connect="/ws/inbox/?items=1&amp;tool=transfer&amp;high_impact=1"' in html
    assert 'ws-connect="/ws/inbox/?items=1"' in as_user("op").get("/").content.decode()


def test_high_impact_and_expiring_filters_show_approvals_only(people, as_user):
    """Those describe approvals: unknown outcomes are hidden, and the page says why."""
    make_approvals(2)
    hot = make_approvals(1, start=50, high_impact=True)[0]
    due = make_approvals(1, start=60, expires_at=NOW + timedelta(minutes=10))[0]
    make_approvals(1, start=70, expires_at=NOW + timedelta(hours=3))
    client = as_user("op")
    html = client.get("/", {"high_impact": "1"}).content.decode()
    assert (
        card_ids(html) == [hot.pk] and 'id="h-unknown"' not in html and "unknown outcomes are hidden" in html
    )
    assert card_ids(client.get("/", {"expiring": "1"}).content.decode()) == [due.pk]


def test_a_damaged_cursor_is_a_clear_400_and_odd_filters_are_ignored(people, as_user):
    """A hand-edited page link never becomes a 500."""
    client = as_user("op")
    for bad in ("x", "W10", "WyJ4IiwxXQ", "WzEsMiwzXQ", "!!!"):
        assert client.get("/", {"after": bad}).status_code == 400
    assert client.get("/", {"uafter": "WzFd"}).status_code == 400
    assert client.get("/", {"high_impact": "yes", "agent": "x" * 5000, "bogus": "1"}).status_code == 200
    assert InboxFilter.parse({"agent": "x" * 5000}).agent == "x" * 128


def test_another_tenants_items_never_appear_on_any_page(people, as_user):
    """t2's approvals stay out of t1's pages, totals and filter choices."""
    make_approvals(3, tenant="t2", tool="secret_tool")
    html = as_user("op").get("/").content.decode()
    assert "secret_tool" not in html and card_ids(html) == []
    assert card_ids(as_user("eve").get("/").content.decode()) != []


def test_a_real_waiting_run_carries_its_sort_key_and_bulk_box(people, as_user, brokerage_path):
    """A card says where it belongs (data-sort) and offers the bulk box to an approver."""
    approval = start_waiting(people["op"])
    html = as_user("bob").get("/").content.decode()
    assert f'value="{approval.pk}:{approval.arguments_hash}" form="bulk-decide"' in html
    stamp = r"\d{4}-\d\d-\d\dT[\d:.]+Z"  # the deadline (or ~ for none), then the request
    assert re.search(rf'data-sort="(~|{stamp})\|{stamp}\|0+{approval.pk}"', html)
    assert 'form="bulk-decide"' not in as_user("viewer").get("/").content.decode()
