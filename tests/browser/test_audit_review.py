"""The audit review pages in Chromium: filters in the URL, the Decisions view, a run's trail,
an event's page and the checkpoints, on a laptop and a 390 px phone, in both themes; the
live tail; every kind on every page.

Tenant ``review`` holds the review tests' log (``tests/site/audit/review_log.py``: 30
events, appended through the product's log) and run ``r-1``; its viewer is ``rev``. Tenant ``kinds``
holds one event of every kind and one more with an empty body; its viewer is ``kit``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from audit.kinds import EVENT_KINDS
from audit.selectors import DECISION_KINDS
from tests.site.audit.every_kind import HOSTILE
from tests.site.audit.review_log import LOG

from . import pages
from .conftest import PASSWORD, Server
from .pages import LAPTOP, PHONE, log_in, page_width

contexts = pages.contexts

SCREENS = {"laptop": {"viewport": LAPTOP}, "phone": {"viewport": PHONE, "is_mobile": True, "has_touch": True}}


def fits(page: Page) -> None:
    wide, window = page_width(page)
    assert wide <= window + 1, f"{page.url} is {wide} px wide on a {window} px screen"


def listed(page: Page) -> list[int]:
    return [
        int(i.removeprefix("ev-"))
        for i in page.locator("table.audit tbody tr").evaluate_all("r => r.map(e => e.id)")
    ]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("screen", ["laptop", "phone"])
def test_filters_decisions_a_runs_trail_and_an_event(
    server: Server, contexts: Any, scheme: str, screen: str
) -> None:
    """Filter with the form (kept in the URL), keep the filters in Decisions, open an event, a run's trail."""
    server.control("review_log", password=PASSWORD)
    rev = log_in(contexts(color_scheme=scheme, **SCREENS[screen]), server, "rev", live=False)
    page = rev.page
    page.goto(f"{server.url}/audit/")
    page.wait_for_url(f"{server.url}/audit/review/")
    # rev's own sign-ins are events of the chain too (auth.signed_in), newest first.
    expect(page.locator('table.audit tbody tr:not([data-kind="auth.signed_in"])')).to_have_count(30)
    fits(page)

    page.locator("#audit-actor").fill("alice")
    page.locator("#audit-q").fill("created:>=2026-12-02")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit/review/?*")
    query = parse_qs(urlsplit(page.url).query)
    assert query["actor"] == ["alice"] and query["q"] == ["created:>=2026-12-02"]
    expected = [s.seq for s in reversed(LOG) if s.actor == "alice" and s.at.day >= 2]
    expect(page.locator("table.audit tbody tr")).to_have_count(len(expected))
    assert listed(page) == expected
    fits(page)

    page.get_by_role("link", name="Decisions").click()
    page.wait_for_url("**/audit/review/decisions/?*")
    decided = [
        s.seq for s in reversed(LOG) if s.actor == "alice" and s.at.day >= 2 and s.kind in DECISION_KINDS
    ]
    expect(page.locator("table.audit tbody tr")).to_have_count(len(decided))
    expect(page.locator("#audit-actor")).to_have_value("alice")
    fits(page)

    page.locator(f"#ev-{decided[0]} a").first.click()
    page.wait_for_url(f"**/audit/review/events/{decided[0]}/")
    expect(page.locator("#proof")).to_contain_text("No checkpoint of this tenant's log has been signed yet.")
    fits(page)

    page.goto(f"{server.url}/runs/review/r-1/")
    page.get_by_role("link", name="This run's audit trail").click()
    page.wait_for_url("**/audit/review/?run=r-1")
    expect(page.locator("table.audit tbody tr")).to_have_count(len([s for s in LOG if s.run_id == "r-1"]))

    page.get_by_role("link", name="Checkpoints").click()
    expect(page.locator(".empty-note")).to_have_text("No checkpoints have been signed yet.")
    fits(page)
    rev.assert_clean()

    response = page.goto(f"{server.url}/audit/review/?from=yesterday")
    assert response is not None and response.status == 400
    expect(page.locator(".form-errors")).to_contain_text("from")
    expect(page.locator("#audit-from")).to_have_attribute("aria-invalid", "true")
    fits(page)
    # The 400 itself is the one thing the browser reports; no script error, no CSP refusal.
    assert [e for e in rev.errors if "status of 400" not in e] == [] and rev.dialogs == []


def test_a_matching_event_arrives_live_at_the_top_and_others_do_not(server: Server, contexts: Any) -> None:
    """The newest page filtered by actor: a new event by that actor appears on top, another's does not."""
    server.control("review_log", password=PASSWORD)
    rev = log_in(contexts(), server, "rev", live=False)
    page = rev.page
    page.goto(f"{server.url}/audit/review/?actor=live-bob")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    expect(page.locator(".empty-note")).to_have_text("No events match these filters.")
    other = server.control("append_event", tenant_id="review", actor="live-carol", kind="run.status")
    mine = server.control("append_event", tenant_id="review", actor="live-bob", kind="run.cancel_requested")
    expect(page.locator(f"#ev-{mine}")).to_be_visible(timeout=10_000)
    assert listed(page)[0] == mine and other not in listed(page)
    expect(page.locator(f"#ev-{mine}")).to_contain_text("Cancel requested")
    page.goto(f"{server.url}/audit/review/decisions/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    later = server.control("append_event", tenant_id="review", actor="live-bob", kind="approval.expired")
    expect(page.locator(f"#ev-{later}")).to_be_visible(timeout=10_000)
    assert listed(page)[0] == later
    rev.assert_clean()


@pytest.mark.parametrize("screen", ["laptop", "phone"])
def test_every_kind_renders_on_the_decisions_view_and_its_own_page(
    server: Server, contexts: Any, screen: str
) -> None:
    """kit's log: each decision kind twice in Decisions; each event's page loads clean, escaped, and fits."""
    head = server.control("every_kind", password=PASSWORD)["head"]
    kit = log_in(contexts(**SCREENS[screen]), server, "kit", live=False)
    page = kit.page
    page.goto(f"{server.url}/audit/kinds/decisions/")
    expect(page.locator("table.audit tbody tr")).to_have_count(2 * len(DECISION_KINDS))
    fits(page)
    kinds_seen = set()
    for seq in range(1, head + 1):
        response = page.goto(f"{server.url}/audit/kinds/events/{seq}/")
        assert response is not None and response.status == 200, seq
        kinds_seen.add(page.locator("section.event").get_attribute("data-kind"))
        fits(page)
    assert kinds_seen >= set(EVENT_KINDS)
    page.goto(f"{server.url}/audit/kinds/?kind=run.cancel_requested")
    page.locator("tbody tr summary").last.click()  # the oldest: the body with a note
    expect(page.locator("tbody tr pre").last).to_contain_text(HOSTILE)
    assert page.evaluate("window.__xss") is None
    kit.assert_clean()
