"""The live push under many sockets: one render per batch and person, failures left to each socket.

Fifty tabs of one person (the inbox benchmark's shape) receive one batch: the first
socket renders the patch, the others await that render on the event loop instead of
each queueing for the sync thread. A render that fails does not leave the waiting
sockets without their patch.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from approvals import consumers
from approvals.services import approval_decide

from .test_consumer import heads, open_socket, receive_until, resume

pytestmark = pytest.mark.django_db(transaction=True)


async def _sockets(user, n: int) -> list:
    sockets = [(await open_socket(user))[0] for _ in range(n)]
    since = await heads()
    for socket in sockets:
        await resume(socket, since)
    return sockets


async def test_many_tabs_of_one_person_get_one_render_of_each_batch(waiting, people, monkeypatch):
    """Twelve tabs of op, one decision: every tab gets the same patch, rendered once."""
    renders: list[str] = []
    original = consumers.InboxConsumer._render_now

    def counted(self, touched, *, full):
        renders.append(self.username)
        return original(self, touched, full=full)

    monkeypatch.setattr(consumers.InboxConsumer, "_render_now", counted)
    sockets = await _sockets(people["op"], 12)
    try:
        renders.clear()
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        texts = [await receive_until(s, lambda t: "data-gone" in t) for s in sockets]
        assert len(set(texts)) == 1
        assert f'<div id="item-a-{waiting.pk}" data-gone="">' in texts[0]
        # One render per batch the decision's events came in (their commit may be split
        # over a poll of the tailer), never one per socket.
        assert 1 <= len(renders) <= 2, renders
        assert not consumers._RENDERING  # nothing left in flight
    finally:
        for socket in sockets:
            await socket.disconnect()


async def test_a_render_that_fails_leaves_the_other_tabs_to_render_their_own(waiting, people, monkeypatch):
    """The first render raises (its socket closes, as before); the other tabs still get the patch."""
    calls: list[str] = []
    original = consumers.InboxConsumer._render_now

    def failing_once(self, touched, *, full):
        calls.append(self.username)
        if len(calls) == 1:
            raise RuntimeError("the first render fails")
        return original(self, touched, full=full)

    sockets = await _sockets(people["op"], 3)
    monkeypatch.setattr(consumers.InboxConsumer, "_render_now", failing_once)
    try:
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        got = []
        for socket in sockets:
            try:
                got.append(await receive_until(socket, lambda t: "data-gone" in t, timeout=5))
            except (AssertionError, asyncio.CancelledError):
                pass  # the socket whose render failed
            except Exception as exc:  # the communicator re-raises the consumer's error
                assert "the first render fails" in str(exc)
        assert len(got) == 2
        assert all(f'<div id="item-a-{waiting.pk}" data-gone="">' in text for text in got)
        assert len(calls) == 2  # the failed render and one shared by the two others
        assert not consumers._RENDERING
    finally:
        for socket in sockets:
            try:
                await socket.disconnect()
            except RuntimeError as exc:  # the failed socket's error, raised again on teardown
                assert "the first render fails" in str(exc)
