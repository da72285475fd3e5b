"""The audit page in Chromium: one event of every kind, in both themes and on a phone.

Tenant ``kinds`` holds one event of each kind the product writes (``audit.kinds``)
and one more of each with an empty body; its viewer ``kit`` opens the chain through
``/audit/`` (one tenant: straight to it). kit's own sign-ins are events of the chain too
(``auth.signed_in``), so that kind is counted at least twice, every other exactly twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from audit.kinds import EVENT_KINDS
from tests.site.audit.every_kind import HOSTILE, WORDS

from . import pages
from .conftest import PASSWORD, Server
from .pages import PHONE, log_in, page_width

contexts = pages.contexts


ROWS = "table.audit tbody tr"


def _each_page(watched: pages.Watched, server: Server) -> Iterator[None]:
    """Open the chain through ``/audit/`` and stop on each of its pages, newest first.

    Two events of every kind outgrow one page (``audit.views.PAGE_SIZE``): the test reads
    them all by following "Older" as a person would.
    """
    page = watched.page
    response = page.goto(f"{server.url}/audit/")
    assert response is not None and response.status == 200
    page.wait_for_url(f"{server.url}/audit/kinds/")
    while True:
        expect(page.locator(ROWS).first).to_be_visible()
        yield
        older = page.get_by_role("link", name="Older →")
        if older.count() == 0:
            return
        older.first.click()
        page.wait_for_load_state()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_kind_shows_in_both_themes(server: Server, contexts: Any, scheme: str) -> None:
    """Each kind is a row with its words; markup in a body is text; no console error, no dialog."""
    server.control("every_kind", password=PASSWORD)
    kit = log_in(contexts(color_scheme=scheme), server, "kit", live=False)
    page = kit.page
    assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") == (scheme == "dark")
    seen: Counter[str] = Counter()
    words: dict[str, list[str]] = {}
    bodies: list[str] = []
    for _ in _each_page(kit, server):
        for kind, text in page.locator(ROWS).evaluate_all(
            "rows => rows.map(r => [r.dataset.kind, r.querySelector('.event-words').textContent])"
        ):
            seen[kind] += 1
            words.setdefault(kind, []).append(text)
        cancels = page.locator('tr[data-kind="run.cancel_requested"]')
        for i in range(cancels.count()):
            if cancels.nth(i).locator("summary").count():
                cancels.nth(i).locator("summary").click()
                bodies.append(cancels.nth(i).locator("pre").inner_text())
        assert page.evaluate("window.__xss") is None
        wide, window = page_width(page)
        assert wide <= window + 1, f"/audit/kinds/ is {wide} px wide on a {window} px screen"
    assert seen.pop("auth.signed_in") >= 2  # and kit's own sign-ins
    assert seen == {kind: 2 for kind in EVENT_KINDS if kind != "auth.signed_in"}
    for kind, said in WORDS.items():
        assert said in words[kind], (kind, words[kind])
    assert any(HOSTILE in body for body in bodies)
    kit.assert_clean()


def test_every_kind_fits_a_phone(server: Server, contexts: Any) -> None:
    """At 390 px every row stays inside the screen, its body opened too."""
    server.control("every_kind", password=PASSWORD)
    phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "kit", live=False)
    page = phone.page
    rows = 0
    for _ in _each_page(phone, server):
        rows += page.locator(ROWS).count()
        for summary in page.locator("table.audit summary").all():
            summary.click()
        wide, window = page_width(page)
        assert wide <= window + 1, f"/audit/kinds/ is {wide} px wide on a {window} px screen"
    assert rows >= 2 * len(EVENT_KINDS)  # with kit's own sign-ins
    phone.assert_clean()
