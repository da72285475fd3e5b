"""The websocket consumer: session auth, per-tenant groups, live patches, catch-up on reconnect."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from approvals import consumers
from approvals.models import Approval
from approvals.services import approval_decide
from audit.models import ChainHead
from audit.wiring import audit_log
from keelgate_site.asgi import application
from tests.site._audit import logged

from .conftest import XSS_SCRIPT, start_waiting, write_hostile_run

pytestmark = pytest.mark.django_db(transaction=True)


def _cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(user=None, path="/ws/inbox/?items=1", origin=b"http://localhost"):
    """A communicator for ``user`` (anonymous when None), with the site's Origin.

    What the fixtures wrote is numbered first: on PostgreSQL an event numbered after the
    socket's baseline is rightly pushed as new, which these tests do not expect."""
    await database_sync_to_async(logged)()
    headers = [(b"origin", origin), (b"host", b"localhost")]
    if user is not None:
        cookie = await database_sync_to_async(_cookie)(user)
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    socket = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await socket.connect(timeout=5)
    return socket, connected, code


async def heads() -> dict[str, int]:
    def read() -> dict[str, int]:
        logged()  # what the fixtures wrote is numbered first, as any reader of the log does
        return dict(ChainHead.objects.values_list("tenant_id", "seq"))

    rows = await database_sync_to_async(read)()
    return {"t1": rows.get("t1", 0), "t2": rows.get("t2", 0)}


async def resume(socket, since) -> str:
    await socket.send_to(text_data=json.dumps({"type": "resume", "since": since}))
    return await socket.receive_from(timeout=5)


async def receive_until(socket, predicate, timeout=10.0) -> str:
    """Messages until one satisfies ``predicate``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no matching message in {timeout}s; got {seen!r}")
        try:
            text = await socket.receive_from(timeout=left)
        except TimeoutError:
            continue
        seen.append(text)
        if predicate(text):
            return text


async def test_an_anonymous_socket_is_closed_with_4401(people):
    """No session: accepted then closed with 4401, so the page does not reconnect in a loop."""
    socket, connected, _ = await open_socket()
    assert connected
    assert (await socket.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4401}


async def test_a_foreign_origin_is_refused(people):
    """Another site's page cannot open the socket with the operator's cookies."""
    _, connected, _ = await open_socket(people["op"], origin=b"https://evil.example")
    assert not connected


async def test_a_message_that_is_not_a_resume_closes_the_socket(people):
    """Unknown fields or types are refused (extra="forbid"): close 4400."""
    socket, connected, _ = await open_socket(people["op"])
    assert connected
    await socket.send_to(text_data=json.dumps({"type": "resume", "since": {}, "admin": True}))
    assert (await socket.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4400}


async def test_resume_answers_with_counts_and_the_chain_numbers(waiting, people):
    """Up to date: counts and the per-tenant chain numbers, no item patches."""
    socket, _, _ = await open_socket(people["op"])
    try:
        now = await heads()
        text = await resume(socket, {"t1": now["t1"]})
        assert 'id="nav-count-approvals"' in text and "approvals waiting: </span>1<" in text
        assert f"&quot;t1&quot;: {now['t1']}" in text
        assert "<article" not in text
    finally:
        await socket.disconnect()


async def test_a_reconnecting_browser_catches_up_from_its_last_number(people, brokerage_path):
    """An approval created while the browser was away is sent on resume from the old number."""
    before = await heads()
    approval = await database_sync_to_async(start_waiting)(people["op"])
    socket, _, _ = await open_socket(people["bob"])
    try:
        text = await resume(socket, {"t1": before["t1"]})
        assert f'id="item-a-{approval.pk}"' in text and 'hx-swap-oob="afterbegin" data-upsert' in text
        assert f"/approvals/{approval.pk}/approve/" in text  # bob is an approver
    finally:
        await socket.disconnect()


async def test_a_settled_item_is_removed_live_for_another_browser(waiting, people):
    """op approves; bob's open socket gets a 'gone' patch naming op (how fast is bench 5's to say)."""
    socket, _, _ = await open_socket(people["bob"])
    try:
        await resume(socket, await heads())
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        text = await receive_until(socket, lambda t: "data-gone" in t)
        assert f'<div id="item-a-{waiting.pk}" data-gone="place_order in run r1 approved by op">' in text
        assert "approvals waiting: </span>0<" in text
    finally:
        await socket.disconnect()


async def test_the_summary_the_section_totals_and_recently_decided_follow_the_stream(waiting, people):
    """After a live decision the numbers around the cards change with it, with the person's note."""
    socket, _, _ = await open_socket(people["bob"])
    try:
        await resume(socket, await heads())
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="deny", note="price <stale>"
        )
        text = await receive_until(socket, lambda t: "data-gone" in t)
        summary = text.split('id="inbox-summary" hx-swap-oob="true">')[1].split("</p>")[0]
        assert "<strong>0</strong> approvals waiting" in summary
        assert '<span class="muted" id="approvals-total" hx-swap-oob="true">(0, soonest expiry' in text
        recent = text.split('id="inbox-recent"')[1].split("</section>")[0]
        assert "denied by <strong>op</strong>" in recent
        assert '<q class="note">price &lt;stale&gt;</q>' in recent
        assert " hidden" not in recent.split(">")[0]
    finally:
        await socket.disconnect()


async def test_a_new_item_arrives_live_and_escaped(people):
    """A hostile approval written while the page is open arrives as escaped text."""
    socket, _, _ = await open_socket(people["op"])
    try:
        await resume(socket, await heads())
        await database_sync_to_async(write_hostile_run)()
        text = await receive_until(socket, lambda t: 'class="item approval' in t)
        assert XSS_SCRIPT not in text and "<img" not in text
        assert "&lt;script&gt;window.__xss=1" in text
        assert 'name="csrfmiddlewaretoken"' not in text  # the page's X-CSRFToken header covers it
    finally:
        await socket.disconnect()


async def test_a_filtered_view_only_receives_matching_items(people):
    """A page filtered to another tool gets the counts, not the card; the matching page gets it."""
    other, _, _ = await open_socket(people["op"], path="/ws/inbox/?items=1&tool=transfer")
    same, _, _ = await open_socket(people["op"], path="/ws/inbox/?items=1&tool=place_order&run=evil")
    try:
        await resume(other, await heads())
        await resume(same, await heads())
        await database_sync_to_async(write_hostile_run)()
        text = await receive_until(other, lambda t: "approvals waiting: </span>1<" in t)
        assert 'class="item approval' not in text and 'data-runs="t1/evil"' in text
        text = await receive_until(same, lambda t: 'class="item approval' in t)
        assert 'data-sort="' in text
    finally:
        await other.disconnect()
        await same.disconnect()


async def test_a_viewer_gets_items_without_forms(people, brokerage_path):
    """Live items are rendered for the receiving user's role: a viewer gets no decision forms."""
    socket, _, _ = await open_socket(people["viewer"])
    try:
        await resume(socket, await heads())
        approval = await database_sync_to_async(start_waiting)(people["op"])
        text = await receive_until(socket, lambda t: f'id="item-a-{approval.pk}"' in t)
        assert "/approve/" not in text and "can look, not decide" in text
    finally:
        await socket.disconnect()


async def test_events_of_another_tenant_never_reach_the_socket(waiting, people):
    """eve (t2 only) hears nothing when t1's approval is decided."""
    socket, _, _ = await open_socket(people["eve"])
    try:
        await resume(socket, await heads())
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        assert await socket.receive_nothing(timeout=1.0)
    finally:
        await socket.disconnect()


async def test_a_counts_only_socket_gets_counts_but_no_items(waiting, people):
    """Pages other than the inbox only keep their navigation counts up to date."""
    socket, _, _ = await open_socket(people["op"], path="/ws/inbox/")
    try:
        await resume(socket, {})
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        text = await receive_until(socket, lambda t: "approvals waiting: </span>0<" in t)
        assert "data-gone" not in text and "kg-since" not in text
        # ...and which runs changed, so a runs page can refresh the rows it shows.
        assert f'data-runs="t1/{waiting.run_id}"' in text
    finally:
        await socket.disconnect()


async def test_a_message_names_only_the_runs_its_events_touched(waiting, people):
    """A decision in one run names that run alone: other runs' live fragments stay put."""
    other = await database_sync_to_async(start_waiting)(people["op"], "other-run")
    socket, _, _ = await open_socket(people["op"], path="/ws/inbox/")
    try:
        await resume(socket, {})
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=other.pk, user=people["op"], decision="approve"
        )
        text = await receive_until(socket, lambda t: "kg-changed" in t and "other-run" in t)
        assert 'data-runs="t1/other-run"' in text and 'data-full="0"' in text
    finally:
        await socket.disconnect()


async def test_a_gap_in_the_batches_is_read_from_the_chain(waiting, people):
    """A dropped batch: the next one's numbers show the gap and the consumer reads it."""
    socket, _, _ = await open_socket(people["bob"])
    try:
        now = await heads()
        await resume(socket, now)
        # Pretend the browser is behind: the consumer must fetch what it never got.
        approval = await database_sync_to_async(Approval.objects.get)(pk=waiting.pk)
        text = await resume(socket, {"t1": now["t1"] - 3})
        assert f'id="item-a-{approval.pk}"' in text
    finally:
        await socket.disconnect()


async def test_a_logged_out_session_ends_the_stream(waiting, people, monkeypatch):
    """After logout the next update closes the socket with 4401 instead of sending data."""
    monkeypatch.setattr(consumers, "SESSION_RECHECK_SECONDS", 0.0)
    socket, _, _ = await open_socket(people["bob"])
    try:
        await resume(socket, await heads())
        from django.contrib.sessions.models import Session

        await database_sync_to_async(lambda: Session.objects.all().delete())()
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            output = await socket.receive_output(timeout=5)
            if output["type"] == "websocket.close":
                assert output["code"] == 4401
                break
            assert not re.search("data-gone", output.get("text", ""))
        else:
            raise AssertionError("the socket stayed open")
    finally:
        await socket.disconnect()


async def test_an_expired_approval_leaves_every_inbox_as_expired(people, brokerage_path, settings):
    """Past its expiry the worker denies it (fail closed, audited) and open inboxes drop it."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "expiring": "tests.site.console.agents.build_expiring",
    }
    approval = await database_sync_to_async(start_waiting)(people["op"], "x1", agent="expiring")
    socket, _, _ = await open_socket(people["bob"])
    try:
        await resume(socket, await heads())
        while timezone.now() <= approval.expires_at:  # wait for the expiry itself, not a guess
            await asyncio.sleep(0.02)
        from approvals.services import approvals_expire

        assert await database_sync_to_async(approvals_expire)() == 1
        text = await receive_until(socket, lambda t: "data-gone" in t)
        assert f'<div id="item-a-{approval.pk}" data-gone="place_order in run x1 expired">' in text
        kinds = await database_sync_to_async(
            lambda: list(logged().filter(tenant_id="t1").values_list("kind", flat=True))
        )()
        assert "approval.expired" in kinds
    finally:
        await socket.disconnect()


async def test_tabs_of_one_person_share_one_render_others_get_their_own(waiting, people, monkeypatch):
    """Three tabs of op and one of bob: the approval patch is rendered once for op, once for bob."""
    renders: list[str] = []
    original = consumers.InboxConsumer._render_now

    def counted(self, touched, *, full):
        renders.append(self.username)
        return original(self, touched, full=full)

    monkeypatch.setattr(consumers.InboxConsumer, "_render_now", counted)
    sockets = [(await open_socket(people[name]))[0] for name in ("op", "op", "op", "bob")]
    try:
        since = await heads()
        for socket in sockets:
            await resume(socket, since)
        renders.clear()
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        texts = [await receive_until(s, lambda t: "data-gone" in t) for s in sockets]
        assert texts[0] == texts[1] == texts[2]
        assert f'<div id="item-a-{waiting.pk}" data-gone="">' in texts[0]  # op's own decision
        assert 'data-gone="place_order in run r1 approved by op"' in texts[3]  # bob is told who
        assert sorted(renders) == ["bob", "op"]
    finally:
        for socket in sockets:
            await socket.disconnect()


async def test_a_message_names_the_tenants_whose_logs_grew_even_without_a_run(people):
    """An event naming no run (a lockout) still names its tenant, for the audit page's live tail."""
    socket, _, _ = await open_socket(people["op"], path="/ws/inbox/")
    try:
        await resume(socket, await heads())
        append = database_sync_to_async(audit_log().append)
        await append("t1", actor="system", kind="auth.locked_out", body={"username": "x"})
        text = await receive_until(socket, lambda t: "kg-changed" in t and 'data-tenants="t1"' in t)
        assert 'data-runs=""' in text
    finally:
        await socket.disconnect()
