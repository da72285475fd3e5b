"""The LangGraph demo agent in Chromium: started from the runs page, its order approved in the
inbox, the graph finishes, and its page shows the gated calls with one order at the brokerage."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from . import pages
from .conftest import Server
from .pages import log_in

contexts = pages.contexts


def test_a_graph_run_waits_in_the_inbox_and_finishes_once_approved(
    server: Server, contexts: Any, artifacts: Any
) -> None:
    """graph-trader: start, wait for the order's approval, approve in the inbox, done, one order."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.goto(f"{server.url}/runs/")
    page.get_by_text("Start a run").click()
    form = page.locator(".start-run form")
    form.get_by_label("Agent").select_option("graph-trader")
    form.get_by_label("Goal").fill("buy 13 ACME")  # a quantity no other browser test orders
    form.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/acme/[0-9a-f]{32}/$"))
    run_id = page.url.rstrip("/").rsplit("/", 1)[1]
    expect(page.locator("#run-status-value")).to_have_text("waiting", timeout=60000)
    timeline = page.locator("#run-timeline")
    expect(timeline).to_contain_text("get_quote")
    expect(timeline).to_contain_text("place_order")
    page.screenshot(path=str(artifacts / "graph-run-waiting.png"), full_page=True)

    server.control("approval", run_id=run_id)
    page.goto(f"{server.url}/?run={run_id}")
    card = page.locator("[data-item]").filter(has_text=run_id).first
    expect(card).to_contain_text("place_order")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#flash")).to_contain_text(f"Approved place_order in run {run_id}")

    page.goto(f"{server.url}/runs/acme/{run_id}/")
    expect(page.locator("#run-status-value")).to_have_text("done", timeout=60000)
    page.screenshot(path=str(artifacts / "graph-run-done.png"), full_page=True)
    orders = [e for e in server.control("ledger") if e["quantity"] == 13]
    assert [(e["executions"], e["replays"]) for e in orders] == [(1, 0)]
