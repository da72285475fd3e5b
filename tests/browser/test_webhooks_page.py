"""The webhooks page in Chromium: a receiver that is down shows its failed attempt, readable, on a phone too.

The endpoint is registered with the real ``keelgate_webhook`` command and delivered to by
a real ``keelgate_notify --once`` pass, both against the server's database; the
receiver's port has nothing listening, so the attempt fails with connection refused.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

from playwright.sync_api import expect

from . import pages
from .conftest import ROOT, Server
from .pages import PHONE, contrast, log_in, page_width

contexts = pages.contexts


def manage(server: Server, *args: str) -> list[str]:
    """Run a management command against the server's database (loopback receivers allowed)."""
    env = {**server.env, "KEELGATE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "KEELGATE_EMAIL_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_failed_delivery_is_visible_readable_and_fits_a_phone(server: Server, contexts: Any) -> None:
    """Register, a run asks for approval, one pass delivers: the failed attempt shows, AA, fits a phone."""
    url = f"http://127.0.0.1:{dead_port()}/hooks/a-rather-long-path-for-a-webhook-receiver-0123456789?token=hidden"
    lines = manage(server, "keelgate_webhook", "--tenant", "acme", "--url", url, "--description", "pager")
    secret = lines[-1]
    assert secret.startswith("whsec_")
    server.control("start_run", run_id="r-webhook-page")
    server.control("approval", run_id="r-webhook-page")  # waits until the approval is in the inbox
    manage(server, "keelgate_notify", "--once", "-v", "0")

    for scheme in ("light", "dark"):
        alice = log_in(contexts(color_scheme=scheme), server, "alice")
        page = alice.page
        page.get_by_role("link", name="Webhooks").click()
        page.wait_for_url(f"{server.url}/webhooks/")
        expect(page.locator(".webhook-endpoints")).to_contain_text("pager")
        expect(page.locator(".webhook-deliveries")).to_contain_text("approval.requested")
        expect(page.locator(".webhook-deliveries")).to_contain_text("connection refused")
        body = page.content()
        assert "token=hidden" not in body and secret not in body
        assert url.partition("?")[0] in body.replace("<wbr>", "")
        for selector in (".webhook-deliveries .status-pending", ".webhook-deliveries td .error"):
            ratio = contrast(page, selector)
            assert ratio >= 4.5, f"{selector} in {scheme}: {ratio:.2f}:1"
        alice.assert_clean()

    phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "alice")
    phone.page.goto(f"{server.url}/webhooks/")
    expect(phone.page.locator(".webhook-deliveries")).to_contain_text("connection refused")
    wide, window = page_width(phone.page)
    assert wide <= window + 1, f"/webhooks/ is {wide} px wide on a {window} px screen"
    phone.assert_clean()
