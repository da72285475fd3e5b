"""The runs pages in Chromium: start a run, cancel it, a list and a timeline that follow the
worker live, phone width and contrast in both themes.

Decisions are taken in the inbox as a person would; runs that need no person are started
through the test's control hand (the same service). Every page must stay free of console
errors and dialogs.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from . import pages
from .conftest import Server
from .pages import PHONE, contrast, log_in, page_width

contexts = pages.contexts

LONG_ID = "r-runs-phone-with-a-rather-long-run-identifier-0123456789-abcdefghij"


def _decide(page: Page, server: Server, run_id: str, decision: str) -> None:
    """Approve or deny the run's waiting order from the inbox, as that page's user."""
    server.control("approval", run_id=run_id)
    page.goto(f"{server.url}/?run={run_id}")
    card = page.locator("[data-item]").filter(has_text=run_id).first
    if decision == "approve":
        card.get_by_role("button", name="Approve", exact=True).click()
        expect(page.locator("#flash")).to_contain_text(f"Approved place_order in run {run_id}")
    else:
        card.get_by_label("Reason to deny").fill("not this one")
        card.get_by_role("button", name="Deny", exact=True).click()
        expect(page.locator("#flash")).to_contain_text(f"Denied place_order in run {run_id}")


def _lifecycle(page: Page, tool: str) -> Any:
    return page.locator("#run-timeline .entry").filter(has=page.locator(f"code.tool:text-is('{tool}')"))


def test_start_a_run_from_the_console_then_cancel_it_from_its_page(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """A goal the agent cannot read comes back with the text kept; a good one starts; Cancel ends it."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.goto(f"{server.url}/runs/")
    page.get_by_text("Start a run").click()
    form = page.locator(".start-run form")
    form.get_by_label("Agent").select_option("paper-trader")
    form.get_by_label("Goal").fill("buy plenty of ACME")
    form.get_by_label("Iterations").fill("4")
    form.get_by_role("button", name="Start run").click()
    expect(page.locator(".form-errors")).to_contain_text("The agent cannot read that goal")
    expect(form.get_by_label("Goal")).to_have_value("buy plenty of ACME")
    expect(form.get_by_label("Iterations")).to_have_value("4")
    expect(form.get_by_label("Agent")).to_have_value("paper-trader")

    form.get_by_label("Goal").fill("buy 2 ACME")
    page.screenshot(path=str(artifacts / "runs-start-form.png"), full_page=True)
    form.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/acme/[0-9a-f]{32}/$"))
    run_id = page.url.rstrip("/").rsplit("/", 1)[1]
    expect(page.locator("#flash")).to_contain_text(f"Started run {run_id}")
    page.evaluate("window.__stayed = true")
    # The worker takes it to the approval without this page reloading.
    expect(page.locator("#run-status-value")).to_have_text("waiting", timeout=30000)
    expect(_lifecycle(page, "place_order").locator(".lifecycle")).to_contain_text("waiting for approval")
    assert server.control("run", run_id=run_id)["status"] == "waiting"

    page.get_by_label("Cancel this run").fill("changed my mind")
    page.get_by_role("button", name="Cancel run").click()  # the box unticked: the browser refuses
    assert server.control("run", run_id=run_id)["status"] == "waiting"
    page.get_by_label("I understand a cancelled run cannot be resumed").check()
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("#flash")).to_contain_text("Cancelled: the run will not continue")
    expect(page.locator("#run-status-value")).to_have_text("cancelled")
    expect(_lifecycle(page, "place_order").locator(".lifecycle")).to_contain_text(
        "withdrawn: run cancelled by alice"
    )
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    expect(page.locator("#run-outcome-sentence")).to_contain_text("Cancelled by alice")
    expect(page.locator(".outcome-line .note")).to_have_text("changed my mind")
    found = server.control("run", run_id=run_id)
    assert found["status"] == "cancelled" and found["stop_reason"] == "cancelled"
    assert server.control("approval", run_id=run_id)["status"] != "pending"
    page.goto(f"{server.url}/runs/?q={run_id}")
    expect(page.locator(f'tr[data-run="acme/{run_id}"] .words')).to_have_text(
        "place_order withdrawn; cancelled by alice"
    )
    # Chromium logs the refused form's 422 (the status a form with errors answers with).
    assert [e for e in alice.errors if "status of 422" in e] == alice.errors[:1]
    alice.errors = alice.errors[1:]
    alice.assert_clean()


def test_the_runs_list_follows_the_worker_live(server: Server, contexts: Any, artifacts: Any) -> None:
    """Rows appear and change words as runs wait, get denied and fill; the search box keeps focus and text."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.goto(f"{server.url}/runs/?q=r-follow")
    expect(page.locator("#runs-table")).to_contain_text("No runs match these filters")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    page.evaluate("window.__stayed = true")
    search = page.locator("#runs-q")
    search.focus()
    expect(search).to_be_focused()

    server.control("start_run", run_id="r-follow-1")
    server.control("start_run", run_id="r-follow-2")
    first, second = (page.locator(f'tr[data-run="acme/r-follow-{i}"] .words') for i in (1, 2))
    expect(first).to_have_text("waiting for approval of place_order", timeout=30000)
    expect(second).to_have_text("waiting for approval of place_order", timeout=30000)
    expect(search).to_be_focused()
    expect(search).to_have_value("r-follow")

    bob = log_in(contexts(), server, "bob")
    _decide(bob.page, server, "r-follow-1", "approve")
    _decide(bob.page, server, "r-follow-2", "deny")
    expect(first).to_have_text("order filled", timeout=30000)
    expect(second).to_have_text("denied by bob", timeout=30000)
    expect(page.locator('tr[data-run="acme/r-follow-1"] .status')).to_have_text("done")
    assert page.evaluate("window.__stayed === true"), "the list reloaded"
    expect(search).to_be_focused()
    page.screenshot(path=str(artifacts / "runs-list-live.png"), full_page=True)
    alice.assert_clean()
    bob.assert_clean()


def test_the_timeline_follows_a_decision_live(server: Server, contexts: Any, artifacts: Any) -> None:
    """The open run page shows approved by bob, then done and the answer, without reloading."""
    server.control("start_run", run_id="r-timeline")
    server.control("approval", run_id="r-timeline")
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.goto(f"{server.url}/runs/acme/r-timeline/")
    order = _lifecycle(page, "place_order")
    expect(order.locator(".lifecycle")).to_contain_text("waiting for approval")
    expect(page.locator("#run-timeline .entry")).to_have_count(2)
    page.evaluate("window.__stayed = true")

    bob = log_in(contexts(), server, "bob")
    _decide(bob.page, server, "r-timeline", "approve")
    expect(order.locator(".lifecycle")).to_contain_text("approved by bob", timeout=30000)
    steps = order.locator(".lifecycle li")
    expect(steps).to_have_text(
        [
            re.compile("^proposed"),
            re.compile("^approval asked"),
            re.compile("^approved by bob"),
            re.compile("^done"),
        ],
        timeout=30000,
    )
    expect(page.locator("#run-timeline .answer")).to_contain_text("Bought 10 ACME")
    expect(page.locator("#run-status-value")).to_have_text("done")
    assert page.evaluate("window.__stayed === true"), "the run page reloaded"
    assert (
        page.locator("#run-timeline .entry[data-action]").count() == 2
    )  # one per action, not per checkpoint
    order.get_by_text("Checkpoint history").click()
    assert order.locator(".sightings li").count() >= 2
    page.screenshot(path=str(artifacts / "run-timeline-live.png"), full_page=True)
    alice.assert_clean()
    bob.assert_clean()


def test_no_runs_page_scrolls_sideways_on_a_phone(server: Server, contexts: Any) -> None:
    """At 390 px: the runs list (form open), a long-id run (folds open), its replay, the audit pages."""
    server.control("start_run", run_id=LONG_ID)
    alice = log_in(contexts(), server, "alice")
    _decide(alice.page, server, LONG_ID, "approve")
    server.control("wait_run", run_id=LONG_ID, status="done")
    phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "bob")
    page = phone.page
    for path in [
        "/runs/",
        f"/runs/?q={LONG_ID}&status=done",
        f"/runs/acme/{LONG_ID}/",
        f"/runs/acme/{LONG_ID}/replay/",
        "/audit/",
        "/audit/acme/",
        "/",
    ]:
        page.goto(f"{server.url}{path}")
        for summary in page.locator("main details > summary").all():
            summary.click()
        if path.startswith("/runs/acme/") and not path.endswith("replay/"):
            expect(page.locator("#run-timeline .entry").first).to_be_visible()
        if path.endswith("replay/"):
            expect(page.locator("main")).to_contain_text("Identical")
        wide, window = page_width(page)
        assert wide <= window + 1, f"{path} is {wide} px wide on a {window} px screen"
    phone.assert_clean()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_runs_pages_meet_aa_contrast_in_both_themes(server: Server, contexts: Any, scheme: str) -> None:
    """The words of each tone, the lifecycle, badges, the start form and muted text: at least 4.5:1."""
    ok, bad, wait = (f"r-tone-{scheme}-{kind}" for kind in ("ok", "bad", "wait"))
    for run_id in (ok, bad, wait):
        server.control("start_run", run_id=run_id)
    alice = log_in(contexts(color_scheme=scheme), server, "alice")
    page = alice.page
    _decide(page, server, ok, "approve")
    _decide(page, server, bad, "deny")
    server.control("wait_run", run_id=ok, status="done")
    server.control("wait_run", run_id=bad, status="done")
    page.goto(f"{server.url}/runs/?q=r-tone-{scheme}")
    page.get_by_text("Start a run").click()
    expect(page.locator(f'tr[data-run="acme/{ok}"] .words')).to_have_text("order filled")
    page.evaluate(  # a queued or running run's tone, on the same cell, however fast the worker is
        f"""document.querySelector('tr[data-run="acme/{wait}"] td[data-label=Status]').insertAdjacentHTML(
        'beforeend', '<span class="words tone-active" id="sample-active">running</span>')"""
    )
    measured = {}
    for selector in [
        f'tr[data-run="acme/{ok}"] .words',
        f'tr[data-run="acme/{bad}"] .words',
        f'tr[data-run="acme/{wait}"] .words',
        f'tr[data-run="acme/{bad}"] .status',
        "#sample-active",
        ".status-done",
        ".status-waiting",
        ".start-run summary",
        ".start-run button.ok",
        ".start-run legend .muted",
        "thead th",
    ]:
        measured[selector] = contrast(page, selector)
    page.goto(f"{server.url}/runs/acme/{ok}/")
    for selector in [".lifecycle .tone-ok", ".lifecycle .tone-wait", ".entry .muted", ".status-done"]:
        measured[f"run page {selector}"] = contrast(page, selector)
    page.goto(f"{server.url}/runs/acme/{wait}/")
    measured["run page button.danger"] = contrast(page, "#run-status button.danger")
    measured["run page waiting badge"] = contrast(page, "#run-status .status-waiting")
    low = {k: round(v, 2) for k, v in measured.items() if v < 4.5}
    assert not low, f"{scheme}: below 4.5:1: {low}"
    alice.assert_clean()
