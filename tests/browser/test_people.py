"""An admin's People and API keys pages in Chromium: add a person, make a key (its secret shown
once), revoke it, and the key answers 401; a viewer sees none of it and no decision buttons."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from playwright.sync_api import expect

from . import pages
from .conftest import Server
from .pages import log_in

contexts = pages.contexts


def api_status(server: Server, key: str) -> int:
    """``GET /api/v1/runs`` with ``key``: its status."""
    request = urllib.request.Request(
        f"{server.url}/api/v1/runs?limit=1", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_an_admin_adds_a_person_makes_a_key_once_and_revokes_it(server: Server, contexts: Any) -> None:
    """alice adds erin as a viewer; makes a key acting as erin, whose secret shows once (not after a
    reload) and works; revokes it and the API answers 401; deactivates erin again; no CSP error."""
    alice = log_in(contexts(), server, "alice")
    page = alice.page
    page.get_by_role("link", name="People").click()
    page.wait_for_url(f"{server.url}/people/")
    form = page.get_by_role("form", name="Add a person to acme")
    form.get_by_label("Username").fill("erin")
    form.get_by_label("Role").select_option("viewer")
    form.get_by_label("Password (a new account)").fill("a-long-pass-4711")
    form.get_by_role("button", name="Add").click()
    expect(page.locator("#flash")).to_contain_text("erin is now viewer in acme (new account).")
    row = page.locator('tr[data-member="erin"]')
    expect(row).to_contain_text("never")  # not signed in yet

    page.get_by_role("link", name="API keys").click()
    page.wait_for_url(f"{server.url}/keys/")
    create = page.get_by_role("form", name="Create an API key in acme")
    create.get_by_label("Name").fill("erin's script")
    create.get_by_label("Acts as").select_option(label="erin (viewer)")
    create.get_by_role("button", name="Create key").click()
    expect(page.locator("#new-key")).to_contain_text("shown only this once")
    secret = page.locator("#new-key-secret").inner_text()
    assert secret.startswith("kg_")
    assert api_status(server, secret) == 200
    page.goto(f"{server.url}/keys/")
    expect(page.locator("#new-key")).to_have_count(0)
    assert secret not in page.content()
    prefix = secret.split("_")[1]
    key_row = page.locator(f'tr[data-key="{prefix}"]')
    expect(key_row).to_contain_text("erin")
    key_row.get_by_role("button", name=f"Revoke kg_{prefix}_…").click()
    expect(page.locator("#flash")).to_contain_text(f"Key kg_{prefix}_… revoked.")
    expect(page.locator(f'tr[data-key="{prefix}"]')).to_contain_text("revoked")
    assert api_status(server, secret) == 401

    page.goto(f"{server.url}/people/")
    page.locator('tr[data-member="erin"]').get_by_role("button", name="Deactivate erin").click()
    expect(page.locator("#flash")).to_contain_text("erin no longer belongs to acme.")
    expect(page.locator('tr[data-member="erin"]')).to_contain_text("deactivated")
    alice.assert_clean()


def test_a_viewer_sees_no_admin_pages_and_no_decision_buttons(server: Server, contexts: Any) -> None:
    """carol (viewer): no People or API keys link, 403 on the pages, and an inbox with a pending
    approval shows her no bulk bar and no Approve button."""
    server.control("start_run", run_id="r-viewer-buttons")
    approval = server.control("approval", run_id="r-viewer-buttons")
    carol = log_in(contexts(), server, "carol")
    page = carol.page
    card = page.locator(f"#item-a-{approval['pk']}")
    expect(card).to_be_visible()
    expect(page.get_by_role("link", name="People")).to_have_count(0)
    expect(page.get_by_role("link", name="API keys")).to_have_count(0)
    expect(page.locator("#bulk-decide")).to_have_count(0)
    expect(page.get_by_role("button", name="Approve selected")).to_have_count(0)
    expect(card.get_by_role("button")).to_have_count(0)
    expect(card.locator("[data-bulk-pick]")).to_have_count(0)
    for path in ("/people/", "/keys/"):
        assert page.goto(f"{server.url}{path}").status == 403
