"""The operator console in Chromium, against Daphne and a worker in their own processes.

The tests share one server and run in file order; each uses its own runs. A page's
console errors, uncaught exceptions and dialogs are collected and must stay empty:
a dialog would mean a payload executed, a CSP report that something tried to.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from . import pages
from .conftest import PASSWORD, Server
from .pages import CONTRAST, PHONE, item, log_in

contexts = pages.contexts
"""The fixture that opens browser contexts (shared by the browser test files)."""

PAYLOADS = {
    "script": "<script>window.__xss=1;alert('xss-script')</script>",
    "img": "<img src=x onerror=\"window.__xss=2;alert('xss-img')\">",
    "url": "javascript:window.__xss=3;alert('xss-url')",
}


def test_log_in_and_see_the_inbox_at_laptop_and_phone_widths(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """The inbox lists the waiting order with its arguments; it fits a phone without sideways scrolling."""
    server.control("start_run", run_id="r-login")
    pk = server.control("approval", run_id="r-login")["pk"]
    alice = log_in(contexts(), server, "alice")
    row = item(alice.page, pk)
    expect(row).to_be_visible()
    expect(row).to_contain_text("place_order")
    expect(row).to_contain_text('"quantity": 10')
    expect(row).to_contain_text("Orders move money: a person must approve.")
    expect(row.get_by_role("link", name="r-login")).to_have_attribute("href", "/runs/acme/r-login/")
    expect(alice.page.locator("#nav-count-approvals")).to_contain_text("1")
    alice.page.screenshot(path=str(artifacts / "inbox-laptop.png"), full_page=True)

    phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "bob")
    expect(item(phone.page, pk)).to_be_visible()
    assert phone.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    phone.page.screenshot(path=str(artifacts / "inbox-phone.png"), full_page=True)
    alice.assert_clean()
    phone.assert_clean()


def test_an_approval_disappears_live_from_another_browser_and_the_run_finishes(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """alice approves; bob's open page drops the item within 2 s without reloading; the run ends done."""
    server.control("start_run", run_id="r-live")
    pk = server.control("approval", run_id="r-live")["pk"]
    alice = log_in(contexts(), server, "alice")
    bob = log_in(contexts(), server, "bob")
    expect(item(bob.page, pk)).to_be_visible()
    bob.page.evaluate("window.__stayed = true")

    row = item(alice.page, pk)
    row.get_by_label("Note").fill("checked the price")
    row.get_by_role("button", name="Approve").click()
    expect(alice.page.locator("#flash")).to_contain_text("Approved place_order in run r-live")
    expect(item(alice.page, pk)).to_have_count(0)

    expect(item(bob.page, pk)).to_have_count(0, timeout=2000)
    assert bob.page.evaluate("window.__stayed === true"), "bob's page reloaded"
    expect(bob.page.locator("#flash")).to_contain_text("approved by alice")

    alice.page.goto(f"{server.url}/runs/acme/r-live/")
    expect(alice.page.locator("#run-status-value")).to_have_text("done", timeout=30000)
    alice.page.reload()
    expect(alice.page.locator("#run-timeline .entry").first).to_be_visible()
    expect(alice.page.locator("#run-status")).to_contain_text("goal_reached")
    alice.page.evaluate("window.scrollTo(0, 0)")
    alice.page.screenshot(path=str(artifacts / "run-page.png"), full_page=True)
    # The world's ledger is shared: r-live's is the one ACME order so far (other files buy others).
    assert [e["executions"] for e in server.control("ledger") if e["result"]["symbol"] == "ACME"] == [1]
    alice.assert_clean()
    bob.assert_clean()


def test_the_second_of_two_people_is_told_who_settled_it(server: Server, contexts: Any) -> None:
    """bob's stale page (no JavaScript: no live update) approves after alice: 'already settled by alice'."""
    server.control("start_run", run_id="r-race")
    pk = server.control("approval", run_id="r-race")["pk"]
    bob = log_in(contexts(java_script_enabled=False), server, "bob", live=False)
    expect(item(bob.page, pk)).to_be_visible()
    alice = log_in(contexts(), server, "alice")
    item(alice.page, pk).get_by_role("button", name="Approve").click()
    expect(item(alice.page, pk)).to_have_count(0)

    item(bob.page, pk).get_by_role("button", name="Approve").click()
    expect(bob.page.locator("#flash")).to_contain_text("Already settled by alice.")
    approval = server.control("approval", run_id="r-race")
    assert approval["status"] == "approved" and approval["decided_by"] == "alice"
    alice.assert_clean()


def test_reconcile_an_unknown_outcome_then_the_run_finishes(server: Server, contexts: Any) -> None:
    """The brokerage fails after executing; the unknown outcome appears live; alice records it as executed."""
    server.control("set_mode", mode="fail")
    try:
        server.control("start_run", run_id="r-unknown")
        pk = server.control("approval", run_id="r-unknown")["pk"]
        alice = log_in(contexts(), server, "alice")
        item(alice.page, pk).get_by_role("button", name="Approve").click()
        unknown = server.control("unknown", run_id="r-unknown")
    finally:
        server.control("set_mode", mode="normal")
    row = item(alice.page, unknown["pk"], "u")
    expect(row).to_be_visible(timeout=10000)
    expect(row).to_contain_text("outcome unknown")
    expect(alice.page.locator("#nav-count-unknown")).to_contain_text("1")
    row.get_by_label("Executed", exact=True).check()
    row.get_by_label("Note", exact=False).fill("order PB seen at the brokerage")
    row.get_by_role("button", name="Record").click()
    expect(alice.page.locator("#flash")).to_contain_text("Recorded place_order in run r-unknown as executed")
    expect(row).to_have_count(0)
    settled = server.control("unknown", run_id="r-unknown")
    assert settled["settled"] and settled["settled_by"] == "alice" and settled["executed"] is True
    server.control("wait_run", run_id="r-unknown", status="done")
    alice.assert_clean()


def test_check_the_brokerage_record_the_order_id_and_the_answer_matches_the_ledger(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """Unknown outcome, Check the brokerage, record Executed with its order id: the run's answer names it."""
    server.control("set_mode", mode="fail")
    try:
        server.control("start_run", run_id="r-check", goal="buy 3 GAMMA")
        pk = server.control("approval", run_id="r-check")["pk"]
        alice = log_in(contexts(), server, "alice")
        item(alice.page, pk).get_by_role("button", name="Approve").click()
        unknown = server.control("unknown", run_id="r-check")
    finally:
        server.control("set_mode", mode="normal")
    row = item(alice.page, unknown["pk"], "u")
    expect(row).to_be_visible(timeout=10000)
    row.get_by_role("button", name="Check the brokerage").click()
    expect(alice.page.locator("#flash")).to_contain_text("The brokerage has this call: it was executed")
    (order,) = [e for e in server.control("ledger") if e["result"]["symbol"] == "GAMMA"]
    order_id = order["result"]["order_id"]
    expect(row.get_by_label("Executed", exact=True)).to_be_checked()
    expect(row.locator("textarea[data-result]")).to_have_value(json.dumps(order["result"], sort_keys=True))
    alice.page.screenshot(path=str(artifacts / "unknown-check-the-brokerage.png"), full_page=True)
    note = row.get_by_label("Note")
    expect(note).to_have_value("")  # the lookup suggests; the person says how they know
    note.fill("the brokerage's record, by its key")
    row.get_by_role("button", name="Record").click()
    expect(alice.page.locator("#flash")).to_contain_text("as executed with the result you found")
    finished = server.control("wait_run", run_id="r-check", status="done")
    assert finished["final_answer"] == f"Bought 3 GAMMA at 7.25 (order {order_id}) as recorded by alice."
    alice.page.goto(f"{server.url}/runs/acme/r-check/")
    expect(alice.page.locator("body")).to_contain_text(f"Bought 3 GAMMA at 7.25 (order {order_id})")
    alice.page.screenshot(path=str(artifacts / "run-after-reconcile.png"), full_page=True)
    assert order["executions"] == 1 and order["replays"] == 0
    alice.assert_clean()


def test_edit_then_approve_places_the_edited_order_only(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """The card's form from the tool's schema: quantity 10 edited to 4; the brokerage fills 4 once."""
    server.control("start_run", run_id="r-edit", goal="buy 10 BETA")
    pk = server.control("approval", run_id="r-edit")["pk"]
    alice = log_in(contexts(), server, "alice")
    card = item(alice.page, pk)
    expect(card).to_contain_text("buy 10 BETA ≈ 420.00 USD at the last quote 42.00")
    card.get_by_text("Edit, then approve").click()
    card.locator("form.edit-approve").get_by_label("quantity").fill("4")
    card.get_by_label("Why the change").fill("four is enough today")
    alice.page.screenshot(path=str(artifacts / "edit-then-approve.png"), full_page=True)
    card.get_by_role("button", name="Approve edited").click()
    expect(alice.page.locator("#flash")).to_contain_text("with your edit: the original will not run")
    finished = server.control("wait_run", run_id="r-edit", status="done")
    assert finished["final_answer"].startswith("Bought 4 BETA at 42.0 (order PB-")  # what was filled
    beta = [e for e in server.control("ledger") if e["result"]["symbol"] == "BETA"]
    assert [(e["quantity"], e["executions"]) for e in beta] == [(4, 1)]
    alice.assert_clean()


def test_a_high_impact_card_is_marked_and_the_shortcut_alone_never_approves(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """999,999 GAMMA ≈ 7.25 M USD: a, Enter lands in the confirmation and is refused; typing approve works."""
    server.control("start_run", run_id="r-big", goal="buy 999999 GAMMA")
    pk = server.control("approval", run_id="r-big")["pk"]
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    card = item(page, pk)
    expect(card).to_contain_text("high impact")
    expect(card).to_contain_text("buy 999,999 GAMMA ≈ 7,249,992.75 USD at the last quote 7.25")
    card.screenshot(path=str(artifacts / "card-high-impact.png"))
    card.click(position={"x": 5, "y": 5})
    page.keyboard.press("a")
    expect(card.locator("[data-approve-confirm]")).to_be_focused()
    page.keyboard.press("Enter")  # the browser's own check: the confirmation is required
    assert server.control("approval", run_id="r-big")["status"] == "pending"
    card.locator("[data-approve-confirm]").fill("approve")
    card.locator("[data-approve-confirm]").press("Enter")
    expect(page.locator("#flash")).to_contain_text("Approved place_order in run r-big")
    assert server.control("wait_run", run_id="r-big", status="done")["status"] == "done"
    alice.assert_clean()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_decision_buttons_meet_aa_contrast_in_both_themes(server: Server, contexts: Any, scheme: str) -> None:
    """Approve, Deny and the high-impact badge: text against its fill at least 4.5:1 (WCAG AA)."""
    server.control("start_run", run_id=f"r-contrast-{scheme}", goal="buy 999999 GAMMA")
    server.control("approval", run_id=f"r-contrast-{scheme}")
    page = log_in(contexts(color_scheme=scheme), server, "alice").page
    for selector in ["button.ok", "button.danger", ".badge.high"]:
        ratio = page.evaluate(CONTRAST, selector)
        assert ratio >= 4.5, f"{selector} in {scheme}: {ratio:.2f}:1"


def test_no_console_page_scrolls_sideways_on_a_phone(server: Server, contexts: Any) -> None:
    """At 390 px the inbox (with an unknown outcome and its long key), the runs list and a run page fit."""
    server.control("set_mode", mode="fail")
    try:
        server.control("start_run", run_id="r-phone-with-a-rather-long-run-identifier-0123456789")
        pk = server.control("approval", run_id="r-phone-with-a-rather-long-run-identifier-0123456789")["pk"]
        alice = log_in(contexts(), server, "alice")
        item(alice.page, pk).get_by_role("button", name="Approve").click()
        server.control("unknown", run_id="r-phone-with-a-rather-long-run-identifier-0123456789")
    finally:
        server.control("set_mode", mode="normal")
    phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "bob").page
    for path in [
        "/",
        "/runs/",
        "/runs/acme/r-phone-with-a-rather-long-run-identifier-0123456789/",
        "/audit/acme/",
    ]:
        phone.goto(f"{server.url}{path}")
        if path == "/":  # the unknown outcome's card, with its idempotency key, is on the page
            expect(phone.locator('[id^="item-u-"]').first).to_contain_text("kg_")
        wide = phone.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert wide[0] <= wide[1] + 1, f"{path} is {wide[0]} px wide on a {wide[1]} px screen"


def test_after_a_keyboard_approval_focus_moves_to_the_next_item(server: Server, contexts: Any) -> None:
    """a, Enter approves the selected item; focus lands on the next item, not the page body."""
    first_pk = server.control("approval", run_id=server.control("start_run", run_id="r-focus-1"))["pk"]
    second_pk = server.control("approval", run_id=server.control("start_run", run_id="r-focus-2"))["pk"]
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    newest = item(page, second_pk)  # newest first: r-focus-2 is above r-focus-1
    newest.click(position={"x": 5, "y": 5})
    page.keyboard.press("a")
    page.keyboard.press("Enter")
    expect(newest).to_have_count(0)
    expect(item(page, first_pk)).to_be_focused()  # the next item, not the page body
    alice.assert_clean()


def test_four_eyes_shows_the_first_approver_live_and_runs_after_the_second(
    server: Server, contexts: Any
) -> None:
    """alice approves (1 of 2): bob sees her name appear live; bob's approval settles it everywhere."""
    server.control("start_run", run_id="r-4eyes", agent="four-eyes")
    pk = server.control("approval", run_id="r-4eyes")["pk"]
    alice = log_in(contexts(), server, "alice")
    bob = log_in(contexts(), server, "bob")
    expect(item(bob.page, pk)).to_contain_text("0 of 2 approved; 2 more needed")

    item(alice.page, pk).get_by_role("button", name="Approve").click()
    expect(alice.page.locator("#flash")).to_contain_text("1 more approver needed")
    expect(item(alice.page, pk)).to_contain_text("You approved this")
    expect(item(alice.page, pk).get_by_role("button", name="Approve")).to_have_count(0)
    expect(item(bob.page, pk)).to_contain_text("1 of 2 approved: alice; 1 more needed", timeout=2000)

    item(bob.page, pk).get_by_role("button", name="Approve").click()
    expect(item(bob.page, pk)).to_have_count(0)
    expect(item(alice.page, pk)).to_have_count(0, timeout=2000)
    server.control("wait_run", run_id="r-4eyes", status="done")
    alice.assert_clean()
    bob.assert_clean()


def test_three_of_n_walks_three_people_through_in_turn_and_runs_the_order_once(
    server: Server, contexts: Any
) -> None:
    """M = 3: alice, bob and dan approve in turn; each sees the tally grow live, with who and
    how many remain; the third approval runs the order, once."""
    server.control("member", username="dan", role="approver", password=PASSWORD)
    before = len(server.control("ledger"))
    server.control("start_run", run_id="r-3ofn", agent="three-of-n")
    pk = server.control("approval", run_id="r-3ofn")["pk"]
    alice = log_in(contexts(), server, "alice")
    bob = log_in(contexts(), server, "bob")
    dan = log_in(contexts(), server, "dan")
    expect(item(dan.page, pk)).to_contain_text("0 of 3 approved; 3 more needed")
    expect(item(dan.page, pk)).to_contain_text("a denial by any one of them ends it")
    expect(item(dan.page, pk)).to_contain_text("Decide on its own")  # never in a bulk decision

    item(alice.page, pk).get_by_role("button", name="Approve").click()
    expect(alice.page.locator("#flash")).to_contain_text("2 more approvers needed")
    expect(item(alice.page, pk)).to_contain_text("You approved this. 2 more people must approve it too.")
    expect(item(bob.page, pk)).to_contain_text("1 of 3 approved: alice; 2 more needed", timeout=2000)
    expect(item(dan.page, pk)).to_contain_text("1 of 3 approved: alice; 2 more needed", timeout=2000)

    item(bob.page, pk).get_by_role("button", name="Approve").click()
    expect(bob.page.locator("#flash")).to_contain_text("1 more approver needed")
    expect(item(dan.page, pk)).to_contain_text("2 of 3 approved: alice, bob; 1 more needed", timeout=2000)
    expect(item(alice.page, pk)).to_contain_text("2 of 3 approved: alice, bob", timeout=2000)
    assert server.control("run", run_id="r-3ofn")["status"] == "waiting"

    item(dan.page, pk).get_by_role("button", name="Approve").click()
    expect(item(dan.page, pk)).to_have_count(0)
    expect(item(alice.page, pk)).to_have_count(0, timeout=2000)
    expect(item(bob.page, pk)).to_have_count(0, timeout=2000)
    server.control("wait_run", run_id="r-3ofn", status="done")
    orders = server.control("ledger")[before:]
    assert [(o["executions"], o["replays"]) for o in orders] == [(1, 0)]
    dan.page.goto(f"{server.url}/runs/acme/r-3ofn/")
    expect(dan.page.locator("#run-timeline")).to_contain_text("3 of 3 approved: alice, bob, dan")
    for person in (alice, bob, dan):
        person.assert_clean()


def test_approve_and_the_same_from_now_on_makes_a_rule_that_approves_the_next_order(
    server: Server, contexts: Any
) -> None:
    """bob approves with "and approve the same from now on" (quantity at most 10, symbol and
    side as proposed); the next such order runs with nobody clicking; an admin revokes the rule;
    the audit review shows it made, used and revoked."""
    server.control("start_run", run_id="r-standing-1", goal="buy 10 DELTA")
    pk = server.control("approval", run_id="r-standing-1")["pk"]
    bob = log_in(contexts(), server, "bob")
    card = item(bob.page, pk)
    card.get_by_text("…and approve the same from now on").click()
    card.get_by_label("Also make a standing rule").check()
    card.get_by_label("calls within these bounds").check()
    expect(card.locator('input[name="standing_max_quantity"]')).to_have_value("10")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(bob.page.locator("#flash")).to_contain_text("From now on, standing rule #")
    server.control("wait_run", run_id="r-standing-1", status="done")

    server.control("start_run", run_id="r-standing-2", goal="buy 7 DELTA")
    server.control("wait_run", run_id="r-standing-2", status="done")  # nobody clicked
    bob.page.goto(f"{server.url}/approvals/standing/")
    rules = bob.page.locator("table.standing-rules")
    expect(rules).to_contain_text("quantity ≤ 10")
    expect(rules).to_contain_text("live")
    expect(rules.get_by_role("button", name="Revoke")).to_have_count(0)  # bob is an approver

    alice = log_in(contexts(), server, "alice", live=False)
    alice.page.goto(f"{server.url}/approvals/standing/")
    alice.page.locator("table.standing-rules").get_by_role("button", name="Revoke").first.click()
    expect(alice.page.locator("table.standing-rules")).to_contain_text("revoked")
    server.control("start_run", run_id="r-standing-3", goal="buy 7 DELTA")
    server.control("wait_run", run_id="r-standing-3", status="waiting")
    assert server.control("approval", run_id="r-standing-3")["status"] == "pending"  # a person again
    for kind, words in (  # the rule's life, in the audit review
        ("approval.standing_created", "Made standing rule #"),
        ("approval.standing_used", "made by bob, approved the call in run r-standing-2."),
        ("approval.standing_revoked", "after 1 uses."),
    ):
        alice.page.goto(f"{server.url}/audit/acme/?kind={kind}")
        expect(alice.page.locator("main")).to_contain_text(words)
    bob.assert_clean()
    alice.assert_clean()


def test_keyboard_j_k_select_and_d_denies_with_a_reason(server: Server, contexts: Any) -> None:
    """j/k move the selection, a focuses the approve note, d the deny reason; Enter denies."""
    server.control("start_run", run_id="r-keys-1")
    first = server.control("approval", run_id="r-keys-1")["pk"]
    server.control("start_run", run_id="r-keys-2")
    newest = server.control("approval", run_id="r-keys-2")["pk"]
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    # Queue order: the soonest deadline first, so r-keys-1 comes right before r-keys-2.
    item(page, first).focus()
    page.keyboard.press("j")
    expect(item(page, newest)).to_have_class("item approval selected")
    page.keyboard.press("k")
    expect(item(page, first)).to_have_class("item approval selected")
    page.keyboard.press("j")
    expect(item(page, newest)).to_have_class("item approval selected")
    page.keyboard.press("a")
    expect(item(page, newest).locator("[data-approve-note]")).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("d")
    deny = item(page, newest).locator("[data-deny-note]")
    expect(deny).to_be_focused()
    page.keyboard.type("wrong symbol")
    page.keyboard.press("Enter")
    expect(item(page, newest)).to_have_count(0)
    expect(page.locator("#flash")).to_contain_text("Denied place_order in run r-keys-2")
    denied = server.control("approval", run_id="r-keys-2")
    assert denied["status"] == "denied" and denied["decided_by"] == "alice"
    # Tidy up: the other one is approved with the keyboard too (a, Enter). Each key waits
    # for the focus the one before it set: the deny's own focus move may land after ours.
    item(page, first).focus()
    expect(item(page, first)).to_be_focused()
    page.keyboard.press("a")
    expect(item(page, first).locator("[data-approve-note]")).to_be_focused()
    page.keyboard.press("Enter")
    expect(item(page, first)).to_have_count(0)
    alice.assert_clean()


def test_verify_the_audit_chain(server: Server, contexts: Any, artifacts: Any) -> None:
    """The audit page lists the chain newest first; Verify reports it intact."""
    alice = log_in(contexts(), server, "alice")
    alice.page.get_by_role("link", name="Audit").click()
    alice.page.wait_for_url(f"{server.url}/audit/acme/")
    expect(alice.page.locator("table.audit")).to_contain_text("approval.decided")
    seqs = [int(s) for s in alice.page.locator("table.audit tbody td[data-label=Seq]").all_inner_texts()]
    assert seqs == sorted(seqs, reverse=True) and len(seqs) == 50
    alice.page.get_by_role("button", name="Verify the chain").click()
    expect(alice.page.locator("#flash")).to_contain_text("Chain of acme is intact")
    alice.page.screenshot(path=str(artifacts / "audit-page.png"), full_page=True)
    alice.assert_clean()


def test_another_tenant_gets_404_for_guessed_urls(server: Server, contexts: Any) -> None:
    """mallory (tenant other) cannot open acme's run or chain, and sees none of its inbox."""
    mallory = log_in(contexts(), server, "mallory")
    for path in ["/runs/acme/r-live/", "/audit/acme/"]:
        response = mallory.page.goto(f"{server.url}{path}")
        assert response is not None and response.status == 404, path
        expect(mallory.page.locator("body")).not_to_contain_text("buy 10 ACME")
    mallory.page.goto(f"{server.url}/")
    expect(mallory.page.locator("[data-item]")).to_have_count(0)


def _assert_nothing_ran(page: Page) -> None:
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("img").count() == 0
    assert (
        page.locator('[href^="javascript:" i], [src^="javascript:" i], [action^="javascript:" i]').count()
        == 0
    )
    scripts = page.evaluate("Array.from(document.scripts).map(s => s.getAttribute('src'))")
    assert all(src and src.startswith("/static/") for src in scripts), scripts


def test_hostile_tool_output_and_arguments_never_execute(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """<script>, <img onerror> and javascript: in arguments and outputs show as text, live and on reload."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    hostile = server.control("hostile_run", run_id="x-evil", payloads=PAYLOADS)
    row = item(page, hostile["approval"])
    expect(row).to_be_visible(timeout=5000)  # arrived over the websocket
    expect(row).to_contain_text(PAYLOADS["script"])
    expect(row).to_contain_text("onerror=")
    expect(item(page, hostile["unknown"], "u")).to_contain_text(PAYLOADS["url"])
    _assert_nothing_ran(page)

    page.reload()
    expect(item(page, hostile["approval"])).to_contain_text(PAYLOADS["script"])
    _assert_nothing_ran(page)

    page.goto(f"{server.url}/runs/acme/x-evil/")
    for summary in page.locator("details > summary").all():
        summary.click()
    expect(page.locator("#run-timeline")).to_contain_text(PAYLOADS["img"])
    for link in page.locator("main a").all():
        assert not (link.get_attribute("href") or "").lower().startswith("javascript:")
    _assert_nothing_ran(page)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(artifacts / "run-page-hostile.png"), full_page=True)

    page.goto(f"{server.url}/audit/acme/")
    _assert_nothing_ran(page)
    page.goto(f"{server.url}/")
    hostile_row = item(page, hostile["approval"])
    hostile_row.get_by_label("Reason to deny").fill("hostile test data")
    hostile_row.get_by_role("button", name="Deny").click()
    expect(hostile_row).to_have_count(0)
    alice.assert_clean()


def test_a_browser_that_reconnects_catches_up(server: Server, contexts: Any) -> None:
    """Daphne restarts; an approval made meanwhile appears after the page reconnects, without a reload."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.evaluate("window.__stayed = true")
    server.stop_daphne()
    expect(page.locator("#live")).to_have_attribute("data-state", "reconnecting", timeout=5000)
    server.control("start_run", run_id="r-offline")
    pk = server.control("approval", run_id="r-offline")["pk"]
    expect(item(page, pk)).to_have_count(0)
    server.start_daphne()
    expect(item(page, pk)).to_be_visible(timeout=30000)
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    assert page.evaluate("window.__stayed === true"), "the page reloaded"
    # The socket was down: Chromium logged the refused reconnection attempts and htmx its
    # wsError events ("[object Event]"); nothing else.
    expected = ("WebSocket connection to", "[object Event]")
    assert [e for e in alice.errors if not e.startswith(expected)] == []
    assert alice.dialogs == []
    item(page, pk).get_by_role("button", name="Approve").click()
    expect(item(page, pk)).to_have_count(0)


SEEN_OBSERVER = """
() => {
  window.__seen = {};
  new MutationObserver(records => {
    const now = Date.now();
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (node.nodeType === 1 && node.id && node.id.startsWith('item-a-') && !(node.id in window.__seen)) {
          window.__seen[node.id] = now;
        }
      }
    }
  }).observe(document.body, {childList: true, subtree: true});
}
"""


def test_live_latency_from_a_worker_approval_to_the_open_browser(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """20 runs: the time from the worker committing an approval to its row in an open page."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.evaluate(SEEN_OBSERVER)
    from_commit, from_request = [], []
    for i in range(20):
        run_id = f"lat-{i:02d}"
        server.control("start_run", run_id=run_id)
        expect(page.locator(f'#approvals-items a[href="/runs/acme/{run_id}/"]')).to_have_count(
            1, timeout=30000
        )
        approval = server.control("approval", run_id=run_id)
        seen_ms = page.evaluate(f"window.__seen['item-a-{approval['pk']}']")
        assert seen_ms is not None
        from_commit.append(seen_ms - approval["created_at"] * 1000)
        from_request.append(seen_ms - approval["requested_at"] * 1000)
    figures = {
        "samples": len(from_commit),
        "from_commit_ms": {"median": statistics.median(from_commit), "worst": max(from_commit)},
        "from_requested_at_ms": {"median": statistics.median(from_request), "worst": max(from_request)},
        "from_commit_all_ms": [round(x, 1) for x in from_commit],
    }
    (artifacts / "live-latency.json").write_text(json.dumps(figures, indent=2))
    commit, request = figures["from_commit_ms"], figures["from_requested_at_ms"]
    print(
        "\nlive latency, worker approval -> row in the open browser (20 runs): "
        f"median {commit['median']:.0f} ms, worst {commit['worst']:.0f} ms "
        f"(from the gateway's requested_at: median {request['median']:.0f} ms, "
        f"worst {request['worst']:.0f} ms)"
    )
    # Each row arrived live (to_have_count above, no reload); how fast is bench 5's figure,
    # measured on a quiet machine: a bound here would fail on a loaded one and prove nothing.
    assert all(ms > 0 for ms in from_commit)
    alice.assert_clean()
