"""docs/deploy.md's topology, tested: the demo's approvals through it, each process restarted once;
a key revoked on one web process refused by both."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Browser, Page, expect

from .conftest import PASSWORD, Process, Topology


def _until(probe: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _log_in(browser: Browser, web: Process, errors: list[str]) -> Page:
    page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.on("console", lambda m: errors.append(f"{web.name}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"{web.name}: uncaught {e}"))
    page.goto(f"{web.url}/login/")
    page.get_by_label("Username").fill("operator")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{web.url}/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    return page


def _pending(topology: Topology) -> list[tuple[int, str]]:
    return topology.sql(
        "SELECT id, run_id FROM approvals_approval"
        " WHERE tenant_id = 'demo' AND status = 'pending' ORDER BY id"
    )


def _status(topology: Topology, run_id: str) -> str:
    rows = topology.sql("SELECT status FROM runs_run WHERE tenant_id = 'demo' AND run_id = %s", run_id)
    return str(rows[0][0]) if rows else ""


def _approve(page: Page, pk: int) -> None:
    card = page.locator(f"#item-a-{pk}")
    card.get_by_role("button", name="Approve").click()
    expect(page.locator("#flash")).to_contain_text("Approved place_order")
    expect(card).to_have_count(0)


def test_the_demo_approvals_run_through_two_web_processes_and_two_workers_each_restarted_once(
    topology: Topology, browser: Browser
) -> None:
    """Two Daphne processes, Redis, two workers, keelgate_notify, PostgreSQL, production settings:
    an approval made on one web process vanishes live from a page on the other; each process is
    restarted once (SIGTERM, start), the pages reconnect by themselves, the second approval goes
    through the other way round, both runs end done and each order executed exactly once."""
    web1, web2 = topology.web
    pending = _until(lambda: len(_pending(topology)) == 2 and _pending(topology), "the demo's two approvals")
    errors: list[str] = []
    alice = _log_in(browser, web1, errors)
    bob = _log_in(browser, web2, errors)
    for page in (alice, bob):
        for pk, _ in pending:
            expect(page.locator(f"#item-a-{pk}")).to_be_visible()
        expect(page.locator(".item.unknown")).to_have_count(1)  # the demo's unknown outcome
    (first, first_run), (second, second_run) = pending

    bob.evaluate("window.__stayed = true")
    _approve(alice, first)
    expect(bob.locator(f"#item-a-{first}")).to_have_count(0, timeout=5000)
    assert bob.evaluate("window.__stayed === true"), "the other web process's page reloaded"
    _until(lambda: _status(topology, first_run) == "done", f"{first_run} done")

    for process in topology.processes:
        old = process.pid
        process.restart()
        assert process.alive() and process.pid != old, process.name
    for page in (alice, bob):
        expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=30000)

    alice.evaluate("window.__stayed = true")
    _approve(bob, second)
    expect(alice.locator(f"#item-a-{second}")).to_have_count(0, timeout=5000)
    assert alice.evaluate("window.__stayed === true")
    _until(lambda: _status(topology, second_run) == "done", f"{second_run} done")

    ledger = json.loads(topology.manage("paper_ledger", "--json"))
    by_symbol = {entry["symbol"]: entry["executions"] for entry in ledger}
    assert by_symbol == {"ACME": 1, "BETA": 1, "GAMMA": 1}, ledger
    assert all(p.starts == 2 and p.alive() for p in topology.processes)
    chain = topology.manage("verify_audit", "--tenant", "demo")
    assert "ok" in chain.lower(), chain
    # Restarting a web process drops its sockets: Chromium logs the refused reconnections
    # and htmx its wsError events; anything else is a failure.
    expected = ("WebSocket connection to", "[object Event]")
    assert all(e.split(": ", 1)[1].startswith(expected) for e in errors), errors


def _api_status(web: Process, key: str) -> int:
    """The status of ``GET /api/v1/runs`` on one web process with ``key``."""
    request = urllib.request.Request(
        f"{web.url}/api/v1/runs?limit=1", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_key_revoked_through_one_web_process_is_refused_by_both_within_a_second(
    topology: Topology, browser: Browser
) -> None:
    """A key both web processes have just verified (and remember, ``KEELGATE_API_KEY_CACHE_SECONDS``
    at its default) is revoked on the console of the first: one second after the revoke answered,
    both processes answer 401 to it (docs/performance.md#api-key-cache)."""
    web1, web2 = topology.web
    key = topology.manage("create_api_key", "--tenant", "demo", "--user", "operator", "--name", "deploy")
    key = key.strip().splitlines()[-1]
    prefix = key.split("_")[1]
    errors: list[str] = []
    page = _log_in(browser, web1, errors)
    page.goto(f"{web1.url}/keys/")
    revoke = page.get_by_role("button", name=f"Revoke kg_{prefix}_…")
    for web in (web1, web2):
        assert _api_status(web, key) == 200, web.name
    revoke.click()
    expect(page.locator("#flash")).to_contain_text(f"Key kg_{prefix}_… revoked.")
    revoked_at = time.monotonic()
    time.sleep(max(0.0, revoked_at + 1.0 - time.monotonic()))
    assert [_api_status(web, key) for web in (web1, web2)] == [401, 401]
    events = topology.sql(
        "SELECT actor FROM audit_auditevent WHERE tenant_id = 'demo' AND kind = 'api_key.revoked'"
    )
    assert events == [("operator",)]
