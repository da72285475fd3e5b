"""An admin manages a webhook in Chromium: register, test, rotate, redeliver, each verified by the receiver.

The receiver is a real HTTP server in this process that checks every message with the
``standardwebhooks`` package (not the product's signing code), holding the secret the
page showed. The product's deliverer is a real ``keelgate_notify --once`` pass against
the server's database. After the rotation the test message must verify with the old
secret alone and with the new one alone (the grace period), and the redelivery must
come with the same id and body.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.site.notifications._receiver import Receiver

from . import pages
from .conftest import Server
from .pages import PHONE, log_in, page_width
from .test_webhooks_page import manage

contexts = pages.contexts


def verifies(secret: str, request: Any) -> bool:
    """Does a receiver holding only ``secret`` accept this request?"""
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


def delivered(server: Server, receiver: Receiver, count: int) -> Any:
    """Run one deliverer pass; the receiver's ``count``-th request, which it acknowledged."""
    manage(server, "keelgate_notify", "--once", "-v", "0")
    assert receiver.wait_for(lambda: len(receiver.acknowledged()) >= count), receiver.requests
    return receiver.acknowledged()[count - 1]


def test_an_admin_registers_tests_rotates_and_redelivers_a_webhook(server: Server, contexts: Any) -> None:
    """Each step in the page; each message verified with standardwebhooks; no CSP violation anywhere."""
    receiver = Receiver()
    try:
        alice = log_in(contexts(), server, "alice")
        page = alice.page
        page.get_by_role("link", name="Webhooks").click()
        page.wait_for_url(f"{server.url}/webhooks/")

        # A private address is refused in the form, with what was typed kept.
        page.get_by_label("URL").fill("http://10.0.0.1/hook")
        page.get_by_role("button", name="Register").click()
        expect(page.locator("#url-error")).to_contain_text("a private address 10.0.0.1 is not allowed")
        expect(page.get_by_label("URL")).to_have_value("http://10.0.0.1/hook")
        # Chromium logs the refused form's 422 (the status a form with errors answers with).
        assert [e for e in alice.errors if "status of 422" in e] == alice.errors == alice.errors[:1]
        alice.errors.clear()

        page.get_by_label("URL").fill(receiver.url)
        page.get_by_label("Label").fill("walk")
        page.get_by_role("button", name="Register").click()
        expect(page.get_by_role("heading", name="Webhook registered")).to_be_visible()
        old = page.locator("#webhook-secret").inner_text().strip()
        assert old.startswith("whsec_")
        receiver.secret = old
        page.get_by_role("link", name="Back to webhooks").click()
        row = page.locator("tr[data-endpoint]", has_text="walk")
        assert old not in page.content()

        row.get_by_role("button", name="Send test").click()
        expect(page.locator("#flash")).to_contain_text("queued")
        first = delivered(server, receiver, 1)
        assert first.verified and first.payload["type"] == "webhook.test" and verifies(old, first)

        row.get_by_role("button", name="Rotate secret").click()
        expect(page.get_by_role("heading", name="New signing secret")).to_be_visible()
        new = page.locator("#webhook-secret").inner_text().strip()
        assert new.startswith("whsec_") and new != old
        expect(page.locator(".webhook-secret")).to_contain_text("signed with the old secret too")
        page.get_by_role("link", name="Back to webhooks").click()
        row.get_by_role("button", name="Send test").click()
        second = delivered(server, receiver, 2)
        assert verifies(old, second) and verifies(new, second)  # the grace: either secret alone verifies
        receiver.secret = new

        # The message page: its payload and the receiver's answer; then send it again.
        page.get_by_role("link", name=second.webhook_id).click()
        expect(page.locator(".payload")).to_contain_text('"type": "webhook.test"')
        expect(page.locator(".webhook-attempts")).to_contain_text("HTTP 200")
        expect(page.locator(".webhook-attempts .response")).to_have_text("ok")
        page.get_by_role("button", name="Redeliver").click()
        expect(page.locator("#flash")).to_contain_text(f"{second.webhook_id} queued again")
        third = delivered(server, receiver, 3)
        assert (third.webhook_id, third.body) == (second.webhook_id, second.body)
        assert third.verified and verifies(new, third)

        # The filter: this endpoint's test messages only.
        page.get_by_label("Event").select_option("webhook.test")
        page.get_by_role("button", name="Filter").click()
        rows = page.locator(".webhook-deliveries tbody tr")
        expect(rows.first).to_contain_text("webhook.test")
        assert all("webhook.test" in text for text in rows.all_inner_texts())
        alice.assert_clean()

        # On a phone the deliveries fit, and no id, event or state is broken across lines.
        phone = log_in(contexts(viewport=PHONE, is_mobile=True, has_touch=True), server, "alice")
        phone.page.goto(f"{server.url}/webhooks/")
        wide, window = page_width(phone.page)
        assert wide <= window + 1, f"/webhooks/ is {wide} px wide on a {window} px screen"
        broken = phone.page.eval_on_selector_all(
            ".webhook-deliveries code, .webhook-deliveries .status",
            "els => els.filter(e => e.getClientRects().length > 1).map(e => e.textContent)",
        )
        assert broken == []
        phone.assert_clean()
    finally:
        receiver.close()


def test_an_approver_has_no_webhooks_link_and_is_refused(server: Server, contexts: Any) -> None:
    """bob (approver): no Webhooks in the nav; the page answers 403."""
    bob = log_in(contexts(), server, "bob")
    expect(bob.page.get_by_role("link", name="Webhooks")).to_have_count(0)
    assert bob.page.request.get(f"{server.url}/webhooks/").status == 403
    bob.assert_clean()
