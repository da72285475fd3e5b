"""The inbox as a work queue in Chromium: bulk decisions, pages to the oldest item, what a
person sees when the server goes away or someone else decides first, help and the tab title."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from . import pages
from .conftest import Server
from .pages import PHONE, item, log_in

contexts = pages.contexts


def test_bulk_approve_two_selected_cards_each_decided_once(server: Server, contexts: Any) -> None:
    """Select two of three with their boxes and x; Approve selected: both go, the third stays."""
    pks = []
    for run_id in ("bulk-1", "bulk-2", "bulk-3"):
        server.control("start_run", run_id=run_id)
        pks.append(server.control("approval", run_id=run_id)["pk"])
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    item(page, pks[0]).get_by_label("Select place_order in run bulk-1 for a bulk decision").check()
    item(page, pks[1]).focus()
    page.keyboard.press("x")  # the keyboard way to the same box
    expect(item(page, pks[1]).locator("[data-bulk-pick]")).to_be_checked()
    page.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-result")).to_contain_text("Approved 2 of 2.")
    expect(page.locator("#bulk-result")).to_contain_text("place_order in run bulk-2: approved")
    expect(item(page, pks[0])).to_have_count(0)
    expect(item(page, pks[1])).to_have_count(0)
    expect(item(page, pks[2])).to_be_visible()
    for run_id in ("bulk-1", "bulk-2"):
        assert server.control("approval", run_id=run_id)["decided_by"] == "alice"
        server.control("wait_run", run_id=run_id, status="done")
    assert server.control("approval", run_id="bulk-3")["status"] == "pending"
    alice.assert_clean()


def test_a_high_impact_card_offers_no_bulk_box(server: Server, contexts: Any) -> None:
    """It says to decide it on its own, and x does nothing on it."""
    server.control("start_run", run_id="bulk-big", goal="buy 500 ACME")
    pk = server.control("approval", run_id="bulk-big")["pk"]
    alice = log_in(contexts(), server, "alice")
    card = item(alice.page, pk)
    expect(card).to_contain_text("Decide on its own")
    expect(card.locator("[data-bulk-pick]")).to_have_count(0)
    alice.assert_clean()


def test_someone_else_settles_while_i_type_and_my_text_stays(server: Server, contexts: Any) -> None:
    """bob types a reason; alice approves first: bob's card stays with his text and no buttons."""
    server.control("start_run", run_id="typing")
    pk = server.control("approval", run_id="typing")["pk"]
    bob = log_in(contexts(), server, "bob")
    alice = log_in(contexts(), server, "alice")
    reason = item(bob.page, pk).get_by_label("Reason to deny")
    reason.fill("the price looks stale, checking with the desk")
    item(alice.page, pk).get_by_role("button", name="Approve").click()
    expect(item(alice.page, pk)).to_have_count(0)
    card = item(bob.page, pk)
    expect(card.locator(".settled-note")).to_contain_text("approved by alice", timeout=5000)
    expect(card.locator(".settled-note")).to_contain_text("what you typed is kept below")
    # The run goes on, and each of its later events says again that the card is settled:
    # once a later run's card has arrived, bob has seen them all, and still one note.
    server.control("wait_run", run_id="typing", status="done")
    server.control("start_run", run_id="typing-after")
    later = server.control("approval", run_id="typing-after")["pk"]
    expect(item(bob.page, later)).to_be_visible()
    expect(card.locator(".settled-note")).to_have_count(1)
    expect(reason).to_have_value("the price looks stale, checking with the desk")
    expect(card.get_by_role("button", name="Deny")).to_be_disabled()
    card.get_by_role("button", name="Dismiss").click()
    expect(card).to_have_count(0)
    bob.assert_clean()


def test_a_live_rerender_keeps_what_was_typed_in_every_kind_of_field(server: Server, contexts: Any) -> None:
    """A card replaced by a live update keeps the deny reason and a reconcile's result text area."""
    server.control("set_mode", mode="fail")
    try:
        server.control("start_run", run_id="typed-u")
        pk = server.control("approval", run_id="typed-u")["pk"]
        alice = log_in(contexts(), server, "alice")
        item(alice.page, pk).get_by_role("button", name="Approve").click()
        unknown = server.control("unknown", run_id="typed-u")["pk"]
    finally:
        server.control("set_mode", mode="normal")
    page = alice.page
    card = item(page, unknown, "u")
    expect(card).to_be_visible(timeout=10000)
    card.get_by_label("Executed", exact=True).check()
    card.locator("textarea[data-result]").fill('{"order_id": "PB-typed"}')
    card.get_by_label("Note").fill("checked by phone")
    card.evaluate("el => el.setAttribute('data-old', '1')")
    server.control("touch_run", run_id="typed-u")
    expect(card).not_to_have_attribute("data-old", "1", timeout=5000)  # the card was replaced
    expect(card.locator("textarea[data-result]")).to_have_value('{"order_id": "PB-typed"}')
    expect(card.get_by_label("Note")).to_have_value("checked by phone")
    expect(card.get_by_label("Executed", exact=True)).to_be_checked()
    alice.assert_clean()


def test_while_disconnected_decisions_are_paused_and_a_banner_says_so(server: Server, contexts: Any) -> None:
    """Daphne stops: the banner shows and the buttons are disabled; it returns: both undone."""
    server.control("start_run", run_id="offline-2")
    pk = server.control("approval", run_id="offline-2")["pk"]
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    approve = item(page, pk).get_by_role("button", name="Approve")
    expect(page.locator("#offline-banner")).to_be_hidden()
    server.stop_daphne()
    try:
        expect(page.locator("#offline-banner")).to_be_visible(timeout=5000)
        expect(page.locator("#offline-banner")).to_contain_text("decisions are paused")
        expect(approve).to_be_disabled()
        expect(page.get_by_role("button", name="Approve selected")).to_be_disabled()
    finally:
        server.start_daphne()
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=30000)
    expect(page.locator("#offline-banner")).to_be_hidden()
    expect(approve).to_be_enabled()
    approve.click()
    expect(item(page, pk)).to_have_count(0)
    expected = ("WebSocket connection to", "[object Event]")
    assert all(e.startswith(expected) for e in alice.errors), alice.errors


def test_a_filtered_page_receives_only_matching_items_live(server: Server, contexts: Any) -> None:
    """Filtered to one run: another run's new approval stays away; the filtered run's arrives live."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.goto(f"{server.url}/?run=live-wanted")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    page.evaluate("window.__stayed = true")
    server.control("start_run", run_id="live-other")
    other = server.control("approval", run_id="live-other")["pk"]
    server.control("start_run", run_id="live-wanted")
    wanted = server.control("approval", run_id="live-wanted")["pk"]
    expect(item(page, wanted)).to_be_visible(timeout=5000)
    expect(item(page, other)).to_have_count(0)
    assert page.evaluate("window.__stayed === true"), "the page reloaded"
    alice.assert_clean()


def test_question_mark_opens_the_help_and_escape_closes_it(server: Server, contexts: Any) -> None:
    """? shows the keys on every page; Esc closes it and the keys work again."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    for path in ("/", "/runs/"):
        page.goto(f"{server.url}{path}")
        page.locator("main").focus()
        page.keyboard.press("?")
        dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("deny the selected item")
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()
    alice.assert_clean()


def test_the_tab_title_counts_what_waits_and_grows_live(server: Server, contexts: Any) -> None:
    """The count is in the title from the start and follows new items without a reload."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    before = int(page.locator("#nav-count-approvals").inner_text().split()[-1])
    unknown = int(page.locator("#nav-count-unknown").inner_text().split()[-1])
    expect(page).to_have_title(f"({before + unknown}) Inbox · Keelgate")
    server.control("start_run", run_id="title-1")
    server.control("approval", run_id="title-1")
    expect(page).to_have_title(f"({before + unknown + 1}) Inbox · Keelgate", timeout=5000)
    alice.assert_clean()


def test_the_notification_opt_in_follows_the_browsers_permission(server: Server, contexts: Any) -> None:
    """Granted: the button turns them on and off. (Showing one needs a hidden tab: not tested here.)"""
    context = contexts()
    context.grant_permissions(["notifications"], origin=server.url)
    alice = log_in(context, server, "alice")
    button = alice.page.locator("#notify-optin")
    expect(button).to_have_text("Notify me of new items on this computer")
    button.click()
    expect(button).to_have_text("Desktop notifications are on (turn off)")
    assert alice.page.evaluate("localStorage.getItem('kg-notify')") == "1"
    button.click()
    expect(button).to_have_text("Notify me of new items on this computer")
    alice.assert_clean()


def test_pages_reach_the_oldest_item_and_filters_fit_a_phone(server: Server, contexts: Any) -> None:
    """120 waiting for one tool: Next, Next reaches the oldest; the filter form fits 390 px."""
    pks = server.control("many_approvals", n=120, tool="probe_tool")
    try:
        alice = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "alice")
        page = alice.page
        page.get_by_label("Tool", exact=True).select_option("probe_tool")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#filter-note")).to_contain_text("120 approvals match")
        expect(item(page, pks[0])).to_be_visible()  # the oldest first
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        seen = set()
        for _ in range(3):
            seen |= {
                int(i.split("-")[-1])
                for i in page.locator("[data-item]").evaluate_all("e => e.map(x => x.id)")
            }
            more = page.get_by_role("link", name="Next 50 approvals")
            if not more.count():
                break
            more.click()
        assert seen == set(pks)
        expect(item(page, pks[-1])).to_be_visible()  # the newest, on the last page
        expect(page.get_by_role("link", name="First page")).to_be_visible()
        alice.assert_clean()
    finally:
        server.control("drop_approvals", tool="probe_tool")


def test_a_message_pushes_the_page_down_never_covers_a_card_and_leaves_at_the_next_action(
    server: Server, contexts: Any
) -> None:
    """Approve one card: its message sits above the cards, overlapping none; approving the
    next sweeps it away (the next answer brings its own)."""
    pks = []
    for run_id in ("toast-1", "toast-2"):
        server.control("start_run", run_id=run_id)
        pks.append(server.control("approval", run_id=run_id)["pk"])
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    item(page, pks[0]).get_by_role("button", name="Approve").click()
    first = page.locator("#flash .flash", has_text="toast-1")
    expect(first).to_be_visible()
    toast, card = first.bounding_box(), item(page, pks[1]).bounding_box()
    assert toast is not None and card is not None
    assert toast["y"] + toast["height"] <= card["y"], (toast, card)  # above it, not over it
    heading = page.locator("h1").first.bounding_box()
    assert (
        heading is None
        or heading["y"] + heading["height"] <= toast["y"]
        or toast["y"] + toast["height"] <= heading["y"]
    )
    item(page, pks[1]).get_by_role("button", name="Approve").click()
    expect(page.locator("#flash .flash", has_text="toast-2")).to_be_visible()
    expect(first).to_have_count(0)
    alice.assert_clean()
