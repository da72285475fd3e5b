"""A run says what really happened, in Chromium: a denied order's run is badged denied and never
"goal reached"; an edited order's final answer names the edit; the list filters by outcome.

The decisions are taken in the inbox as a person would. Every page must stay free of console
errors (a CSP violation among them) and dialogs.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from . import pages
from .conftest import Server
from .pages import PHONE, item, log_in, page_width

contexts = pages.contexts


def test_a_denied_run_is_badged_denied_and_an_edited_run_names_the_edit(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """Denied: badge, sentence with the denier and note, no "goal reached"; edited: 20 -> 15 in the answer."""
    server.control("start_run", run_id="r-out-denied", goal="buy 20 ACME")
    server.control("start_run", run_id="r-out-edited", goal="buy 20 ACME")
    denied_pk = server.control("approval", run_id="r-out-denied")["pk"]
    edited_pk = server.control("approval", run_id="r-out-edited")["pk"]
    alice = log_in(contexts(), server, "alice")
    page = alice.page

    card = item(page, denied_pk)
    card.get_by_label("Reason to deny").fill("not at this price")
    card.get_by_role("button", name="Deny", exact=True).click()
    expect(page.locator("#flash")).to_contain_text("Denied place_order in run r-out-denied")

    card = item(page, edited_pk)
    card.get_by_text("Edit, then approve").click()
    card.locator("form.edit-approve").get_by_label("quantity").fill("15")
    card.get_by_label("Why the change").fill("fifteen is enough")
    card.get_by_role("button", name="Approve edited").click()
    expect(page.locator("#flash")).to_contain_text("with your edit: the original will not run")

    assert server.control("wait_run", run_id="r-out-denied", status="done")["outcome"] == "denied"
    assert (
        server.control("wait_run", run_id="r-out-edited", status="done")["outcome"] == "completed_with_edit"
    )

    page.goto(f"{server.url}/runs/acme/r-out-denied/")
    expect(page.locator("#run-outcome")).to_have_text("denied")
    expect(page.locator("#run-outcome")).to_have_attribute("data-outcome", "denied")
    expect(page.locator("#run-outcome-sentence")).to_have_text("Denied by alice: place_order never ran.")
    expect(page.locator("#run-status")).to_contain_text("not at this price")
    expect(page.locator("#answer")).to_contain_text("Denied by alice")
    expect(page.locator("#answer")).to_contain_text("The order to buy 20 ACME was not placed.")
    assert "goal reached" not in page.locator("main").inner_text().lower()
    page.screenshot(path=str(artifacts / "run-outcome-denied.png"), full_page=True)

    page.goto(f"{server.url}/runs/acme/r-out-edited/")
    expect(page.locator("#run-outcome")).to_have_text("completed with an edit")
    answer = page.locator("#final-answer")
    expect(answer).to_contain_text("Bought 15 ACME")
    expect(answer.locator(".edit-note")).to_have_text("(alice changed quantity from 20 to 15)")
    page.screenshot(path=str(artifacts / "run-outcome-edited.png"), full_page=True)

    page.goto(f"{server.url}/runs/")
    page.locator("#runs-filters select[name=outcome]").select_option("denied")
    expect(page).to_have_url(f"{server.url}/runs/?outcome=denied")
    rows = page.locator("#runs-table tbody tr")
    expect(rows.filter(has_text="r-out-denied")).to_have_count(1)
    expect(rows.filter(has_text="r-out-edited")).to_have_count(0)
    expect(rows.filter(has_text="r-out-denied").locator("[data-outcome]")).to_have_text("denied")
    alice.assert_clean()

    phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "bob")
    phone.page.goto(f"{server.url}/runs/?outcome=completed_with_edit")
    expect(phone.page.locator("#runs-table [data-outcome]").first).to_have_text("completed with an edit")
    wide, window = page_width(phone.page)
    assert wide <= window + 1, (wide, window)
    phone.page.screenshot(path=str(artifacts / "run-outcomes-phone.png"), full_page=True)
    phone.assert_clean()
