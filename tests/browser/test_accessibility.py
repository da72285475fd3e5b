"""Every console page, with rows on it, judged by axe-core in Chromium at laptop and phone width.

axe-core is the checker outside reviewers run (Deque's rules for WCAG 2.x A and AA, and
best practices); ``axe-playwright-python`` carries its script into the page. A page
passes with no violation of any impact. The rows are the ones a person would see: a
waiting approval, an unknown outcome, a run's timeline, an audit event, a live and a
revoked standing rule, the Slack linking page, an emailed decision link's page and its
refusal to someone else.
"""

from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe

from . import pages
from .conftest import Server
from .pages import LAPTOP, PHONE, item, log_in

contexts = pages.contexts

PAGES = (
    "/",
    "/runs/",
    "/runs/acme/r-axe-wait/",
    "/runs/acme/r-axe-unknown/",
    "/audit/",
    "/audit/acme/",
    "/audit/acme/decisions/",
    "/audit/acme/checkpoints/",
    "/audit/acme/events/1/",
    "/approvals/standing/",
    "/webhooks/",
    "/slack/link/",
    "/people/",
    "/keys/",
)


def violations(axe: Axe, page: Any) -> list[str]:
    """Each violation as one line: its rule, impact, where and why."""
    found = axe.run(page).response["violations"]
    return [
        f"{v['id']} ({v['impact']}) at {node['target']}: {node['failureSummary']}"
        for v in found
        for node in v["nodes"]
    ]


def test_every_console_page_with_its_rows_has_no_axe_violation(server: Server, contexts: Any) -> None:
    server.control("start_run", run_id="r-axe-wait", goal="buy 10 AXE")
    waiting = server.control("approval", run_id="r-axe-wait")["pk"]
    server.control("set_mode", mode="fail")
    try:
        server.control("start_run", run_id="r-axe-unknown", goal="buy 2 AXE")  # not ACME: see test_console
        pk = server.control("approval", run_id="r-axe-unknown")["pk"]
        alice = log_in(contexts(), server, "alice")
        item(alice.page, pk).get_by_role("button", name="Approve").click()
        unknown = server.control("unknown", run_id="r-axe-unknown")
    finally:
        server.control("set_mode", mode="normal")
    live = server.control("standing_rule", symbol="AXEONLY")
    server.control("standing_rule", symbol="AXEGONE", revoke=True)
    axe = Axe()
    found: dict[str, list[str]] = {}
    try:
        for width, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
            person = alice if width == "laptop" else log_in(contexts(viewport=viewport), server, "alice")
            for path in PAGES:
                person.page.goto(f"{server.url}{path}")
                if path == "/":
                    item(person.page, waiting).wait_for()
                    item(person.page, unknown["pk"], "u").wait_for()
                found[f"{path} ({width})"] = violations(axe, person.page)
            person.assert_clean()
        link = server.control("decision_link", run_id="r-axe-wait", username="alice")
        alice.page.goto(f"{server.url}{link}")
        alice.page.get_by_role("button", name="Approve").wait_for()  # the call, to confirm
        found["a decision link's page"] = violations(axe, alice.page)
        bob = log_in(contexts(), server, "bob", live=False)
        bob.page.goto(f"{server.url}{link}")  # alice's link, forwarded: refused
        found["a decision link's refusal"] = violations(axe, bob.page)
        login = contexts().new_page()
        login.goto(f"{server.url}/login/")
        found["/login/"] = violations(axe, login)
    finally:
        server.control("standing_revoke", rule_id=live)
        for run_id in ("r-axe-wait", "r-axe-unknown"):
            server.control("settle", run_id=run_id)
    assert {where: lines for where, lines in found.items() if lines} == {}
    assert len(found) == 2 * len(PAGES) + 3
