"""The audit page in Chromium: one event of every kind, in both themes and on a phone.

Tenant ``kinds`` holds one event of each kind the product writes (``audit.kinds``)
and one more of each with an empty body; its viewer ``kit`` opens the chain through
``/audit/`` (one tenant: straight to it). There are more of them than a page holds, and
kit's sign-ins are events of the chain too, so each half is read as its own page: the
full bodies (``?before=``, the oldest events) and the empty ones (``?after=``, the writer's).
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from audit.kinds import EVENT_KINDS
from tests.site.audit.every_kind import HOSTILE, WORDS

from . import pages
from .conftest import PASSWORD, Server
from .pages import PHONE, log_in, page_width

contexts = pages.contexts


def _open_chain(watched: pages.Watched, server: Server, *, empty: bool = False) -> None:
    """The chain's page of the full bodies (events 1..N, one of each kind), or of the empty ones."""
    page = watched.page
    response = page.goto(f"{server.url}/audit/")
    assert response is not None and response.status == 200
    page.wait_for_url(f"{server.url}/audit/kinds/")
    n = len(EVENT_KINDS)
    query = f"actor=tester&after={n}" if empty else f"before={n + 1}"
    page.goto(f"{server.url}/audit/kinds/?{query}")
    expect(page.locator("table.audit tbody tr")).to_have_count(n)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_kind_shows_in_both_themes(server: Server, contexts: Any, scheme: str) -> None:
    """Each kind is a row with its words; markup in a body is text; no console error, no dialog."""
    server.control("every_kind", password=PASSWORD)
    kit = log_in(contexts(color_scheme=scheme), server, "kit", live=False)
    _open_chain(kit, server)
    page = kit.page
    assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") == (scheme == "dark")
    for kind in EVENT_KINDS:
        expect(page.locator(f'tr[data-kind="{kind}"]')).to_have_count(1)
    for kind, said in WORDS.items():
        expect(page.locator(f'tr[data-kind="{kind}"] .event-words')).to_have_text(said)
    page.locator('tr[data-kind="run.cancel_requested"] summary').last.click()
    expect(page.locator('tr[data-kind="run.cancel_requested"] pre').last).to_contain_text(HOSTILE)
    assert page.evaluate("window.__xss") is None
    wide, window = page_width(page)
    assert wide <= window + 1, f"/audit/kinds/ is {wide} px wide on a {window} px screen"
    _open_chain(kit, server, empty=True)
    for kind in EVENT_KINDS:
        expect(page.locator(f'tr[data-kind="{kind}"]')).to_have_count(1)
    kit.assert_clean()


def test_every_kind_fits_a_phone(server: Server, contexts: Any) -> None:
    """At 390 px every row stays inside the screen, its body opened too."""
    server.control("every_kind", password=PASSWORD)
    phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "kit", live=False)
    page = phone.page
    for empty in (False, True):
        _open_chain(phone, server, empty=empty)
        for summary in page.locator("table.audit summary").all():
            summary.click()
        wide, window = page_width(page)
        assert wide <= window + 1, f"/audit/kinds/ is {wide} px wide on a {window} px screen"
    phone.assert_clean()
