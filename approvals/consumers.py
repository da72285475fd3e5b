"""The live inbox over a websocket: per-tenant groups, authenticated from the session.

A browser connects to ``/ws/inbox/`` (``?items=1`` on the inbox page, counts only
elsewhere) and sends :class:`~approvals.events.ResumeRequest` with the last chain
number it has seen per tenant. The consumer joins the group of every tenant the user
belongs to and answers with HTML for htmx's websocket extension: out-of-band swaps that
insert, replace or remove inbox items, and update the navigation counts.

Updates are driven by the audit chain (see :mod:`approvals.outbox`): a batch names the
runs its events touched, and the consumer re-reads the inbox rows of those runs and
renders each as this user sees it (their role, whether they already voted). A batch is
only a hint: numbers already seen are ignored, and a gap (a dropped message, a long
disconnect) is read from the chain itself, or answered with a fresh list.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.template.loader import render_to_string
from django.utils.timezone import now
from pydantic import ValidationError

from approvals.cards import (
    InboxEntry,
    InboxView,
    approval_entry,
    inbox_numbers,
    inbox_sections,
    unknown_entry,
)
from approvals.events import OutboxBatch, ResumeRequest, tenant_group
from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from approvals.outbox import OutboxTailer, read_items, tailer
from approvals.selectors import approvals_for, inbox_counts, recently_decided, unknown_outcomes_for
from audit.selectors import audit_heads
from tenants.models import Membership

CLOSE_UNAUTHENTICATED = 4401
"""Not logged in, or the session ended: the page should log in again (no auto-reconnect)."""
CLOSE_BAD_MESSAGE = 4400

CATCHUP_LIMIT = 500
"""Beyond this many missed events, send a fresh list instead of replaying them."""

SESSION_RECHECK_SECONDS = 30.0

RENDER_CACHE_SECONDS = 2.0
"""How long one rendered patch serves every other socket with the same view of it."""


class _Rendered:
    """Patches rendered in this process, by everything that makes them differ.

    A batch reaches every socket of a tenant; sockets of one person at one chain
    position (tabs, devices) would each read the same rows and render the same HTML.
    The key holds the person, their roles, the socket kind, what was touched and the
    chain numbers; an entry lives a couple of seconds, and the next batch re-reads.
    """

    def __init__(self, size: int = 256) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], tuple[float, str]] = OrderedDict()
        self._size = size

    def get(self, key: tuple[Any, ...]) -> str | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or time.monotonic() - hit[0] > RENDER_CACHE_SECONDS:
                return None
            return hit[1]

    def clear(self) -> None:
        """Forget every patch (tests that reset the database reuse chain numbers)."""
        with self._lock:
            self._entries.clear()

    def put(self, key: tuple[Any, ...], html: str) -> None:
        with self._lock:
            self._entries[key] = (time.monotonic(), html)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


RENDERED = _Rendered()

_RENDERING: dict[tuple[Any, ...], asyncio.Future[str | None]] = {}
"""Patches being rendered now, by key: the other sockets of a batch await the first's render."""


def _keeping_connection(fn: Callable[..., str], *, retry: bool = False) -> Callable[..., Awaitable[str]]:
    """``fn`` on the consumers' sync thread, keeping that thread's database connection.

    ``database_sync_to_async`` closes old connections around every call, and with
    ``CONN_MAX_AGE = 0`` that is every connection: each live patch paid a new
    PostgreSQL connection, a quarter of Daphne's busy time behind 50 sockets. The live
    renders only read, outside any transaction, so the connection is kept between
    them, checked after an error as Django checks one. With ``retry`` (a render, which
    changes nothing), a call that meets a dead connection runs once more on a new one.
    The connection is closed when the last socket of the process leaves
    (:meth:`InboxConsumer.disconnect`).
    """

    def run(*args: Any, **kwargs: Any) -> str:
        conn = connections[DEFAULT_DB_ALIAS]
        if conn.errors_occurred and conn.connection is not None and not conn.is_usable():
            conn.close()
        conn.errors_occurred = False
        try:
            return fn(*args, **kwargs)
        except OperationalError:
            conn.close()
            if not retry:
                raise
            return fn(*args, **kwargs)

    return sync_to_async(run, thread_sensitive=True)


def _nothing() -> None:
    """A no-op: ``database_sync_to_async`` around it closes the thread's old connections."""


def _roles(user: Any) -> dict[str, str]:
    rows = Membership.objects.filter(user=user).values_list("tenant__slug", "role")
    return dict(sorted(rows))


class InboxConsumer(AsyncWebsocketConsumer):
    """One browser tab's live inbox."""

    tenants: dict[str, str]
    """The user's role per tenant slug, read at connect."""
    since: dict[str, int]
    """Per tenant, the chain number whose effects this browser has been sent."""

    async def connect(self) -> None:
        self.tenants, self.since, self._tailer = {}, {}, None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.user = user
        self.username = user.get_username()
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        self.items = query.get("items") == ["1"]
        # The page's filter and cursors: a filtered view only receives the items it shows.
        self.view = InboxView.parse({k: v[0] for k, v in query.items() if v})
        self.tenants = await database_sync_to_async(_roles)(user)
        for tenant_id in self.tenants:
            await self.channel_layer.group_add(tenant_group(tenant_id), self.channel_name)
        # Joined first, then read the heads: a batch sent from now on reaches this
        # consumer, and everything before it is at most these numbers.
        self.since = await database_sync_to_async(audit_heads)(list(self.tenants))
        self._session_checked = time.monotonic()
        await self.accept()
        if self.tenants:
            self._tailer = tailer()
            self._tailer.watch(self.since)

    async def disconnect(self, code: int) -> None:
        watcher: OutboxTailer | None = getattr(self, "_tailer", None)
        if watcher is not None:
            watcher.unwatch(list(self.tenants))
            self._tailer = None
            if not watcher.watchers:
                # The last socket here: let Django close the connection the renders kept.
                await database_sync_to_async(_nothing)()
        for tenant_id in getattr(self, "tenants", {}):
            await self.channel_layer.group_discard(tenant_group(tenant_id), self.channel_name)

    # -- from the browser -------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Only :class:`ResumeRequest` is accepted; anything else closes the socket."""
        if not hasattr(self, "user"):
            return
        try:
            request = ResumeRequest.model_validate_json(text_data or "")
        except ValidationError:
            await self.close(code=CLOSE_BAD_MESSAGE)
            return
        html = await database_sync_to_async(self._catch_up)(request.since)
        await self.send(text_data=html)

    # -- from the outbox tailer ---------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its ``aclose_old_connections`` before every message.

        That is a hop to the one thread that runs every consumer's sync work, for each
        socket and each batch: with 50 sockets, 50 hops queued ahead of the render each
        batch waits for. Every database call here goes through ``database_sync_to_async``,
        which closes old connections before and after itself.
        """
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def outbox_batch(self, message: dict[str, Any]) -> None:
        """New events of one of the user's tenants: patch the browser's inbox."""
        batch = OutboxBatch.model_validate(message)
        if batch.tenant_id not in self.tenants or batch.last_seq <= self.since.get(batch.tenant_id, 0):
            return
        if time.monotonic() - self._session_checked > SESSION_RECHECK_SECONDS:
            if not await database_sync_to_async(self._session_alive)():
                await self.close(code=CLOSE_UNAUTHENTICATED)
                return
            self._session_checked = time.monotonic()
        touched = self._contiguous(batch)
        if touched is None:
            html = await _keeping_connection(self._apply)(batch)
        else:
            # The batch lists everything after what this socket has seen: no read is
            # needed to know what it touched, so the patch is looked up (or awaited, if
            # another socket is rendering it) here, without a hop to the sync thread.
            html = await self._shared(touched)
        await self.send(text_data=html)

    def _contiguous(self, batch: OutboxBatch) -> dict[str, set[str]] | None:
        """The runs a complete batch that follows on from ``since`` touched (``since`` moved on).

        None when the batch leaves a gap or is incomplete: :meth:`_apply` reads the chain.
        """
        tenant_id, seen = batch.tenant_id, self.since.get(batch.tenant_id, 0)
        if not (batch.complete and batch.first_seq <= seen + 1):
            return None
        self.since[tenant_id] = max(seen, batch.last_seq)
        return {tenant_id: {i.run_id for i in batch.items if i.seq > seen and i.run_id}}

    async def _shared(self, touched: dict[str, set[str]]) -> str:
        """The patch for ``touched`` at this socket's ``since``: cached, being rendered, or rendered now."""
        key = self._key(touched, full=False)
        loop = asyncio.get_running_loop()
        while True:
            html = RENDERED.get(key)
            if html is not None:
                return html
            pending = _RENDERING.get(key)
            if pending is None or pending.get_loop() is not loop:
                break
            html = await asyncio.shield(pending)
            if html is not None:
                return html
            # That render failed: look again, another socket may be rendering it by now.
        future: asyncio.Future[str | None] = loop.create_future()
        _RENDERING[key] = future
        rendered: str | None = None
        try:
            rendered = await _keeping_connection(self._render_now, retry=True)(touched, full=False)
            RENDERED.put(key, rendered)
        finally:
            # Waiters get the patch, or None (this render failed or its socket left) and render their own.
            if _RENDERING.get(key) is future:
                del _RENDERING[key]
            future.set_result(rendered)
        return rendered

    # -- sync work (a thread) ----------------------------------------------------------

    def _session_alive(self) -> bool:
        """The session still exists and still belongs to this user (not logged out)."""
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        if not key:
            return False
        store = import_module(settings.SESSION_ENGINE).SessionStore(key)
        return bool(store.load().get(SESSION_KEY) == str(self.user.pk))

    def _catch_up(self, client_since: dict[str, int]) -> str:
        heads = audit_heads(list(self.tenants))
        touched: dict[str, set[str]] = {}
        full = False
        for tenant_id, head in heads.items():
            seen = client_since.get(tenant_id, self.since.get(tenant_id, head))
            if seen > head or head - seen > CATCHUP_LIMIT:
                full = True  # another database, or away too long: start over
            elif head > seen:
                items, complete = read_items(tenant_id, seen, CATCHUP_LIMIT)
                full = full or not complete
                touched[tenant_id] = {i.run_id for i in items if i.run_id and i.seq <= head}
            self.since[tenant_id] = head
        return self._render(touched, full=full)

    def _apply(self, batch: OutboxBatch) -> str:
        tenant_id, seen = batch.tenant_id, self.since.get(batch.tenant_id, 0)
        full = False
        if batch.complete and batch.first_seq <= seen + 1:
            items = [i for i in batch.items if i.seq > seen]
            last = batch.last_seq
        else:
            # A batch went missing (or was too big to list): read the stretch from the chain.
            items, complete = read_items(tenant_id, seen, CATCHUP_LIMIT)
            full = not complete
            last = max([batch.last_seq, *(i.seq for i in items)])
        self.since[tenant_id] = max(seen, last)
        return self._render({tenant_id: {i.run_id for i in items if i.run_id}}, full=full)

    def _key(self, touched: dict[str, set[str]], *, full: bool) -> tuple[Any, ...]:
        """Everything a patch for this socket depends on (see :class:`_Rendered`)."""
        return (
            self.username,
            tuple(sorted(self.tenants.items())),
            self.items,
            self.view,
            full,
            tuple(sorted((t, tuple(sorted(runs))) for t, runs in touched.items())),
            tuple(sorted(self.since.items())),
        )

    def _render(self, touched: dict[str, set[str]], *, full: bool) -> str:
        """Counts always; with ``items``, the touched runs' inbox rows (or the whole list)."""
        key = self._key(touched, full=full)
        html = RENDERED.get(key)
        if html is None:
            html = self._render_now(touched, full=full)
            RENDERED.put(key, html)
        return html

    def _render_now(self, touched: dict[str, set[str]], *, full: bool) -> str:
        context: dict[str, Any] = {
            "counts": inbox_counts(tenant_ids=list(self.tenants)),
            "items": self.items,
            "full": full,
            "since_json": json.dumps(self.since, sort_keys=True),
            "changed_runs": " ".join(
                sorted(f"{tenant_id}/{run_id}" for tenant_id, runs in touched.items() for run_id in runs)
            ),
            # Whose logs grew, whether or not their events name a run (the audit page's tail).
            "changed_tenants": " ".join(sorted(touched)),
        }
        if self.items:  # the numbers around the cards follow the stream too
            context.update(
                recent=recently_decided(tenant_ids=list(self.tenants)),
                approvals_only=self.view.filter.approvals_only,
            )
        if self.items and full:
            sections = inbox_sections(roles=self.tenants, username=self.username, view=self.view, now=now())
            context.update(
                {"s": sections, "n": sections, "approvals": sections.approvals, "unknowns": sections.unknowns}
            )
        elif self.items:
            context["n"] = inbox_numbers(tenant_ids=list(self.tenants), view=self.view, now=now())
            upsert_a, upsert_u, gone_a, gone_u = [], [], [], []
            shown = self.view.filter
            for tenant_id, run_ids in touched.items():
                if not run_ids:
                    continue
                approvals = approvals_for(tenant_ids=[tenant_id], status=None).filter(run_id__in=run_ids)
                matching = set(shown.approvals(approvals, now=now()).values_list("pk", flat=True))
                for row in approvals:
                    if row.status == ApprovalStatus.PENDING and row.pk in matching:
                        upsert_a.append(self._approval(row))
                    elif row.status == ApprovalStatus.PENDING:  # no longer matches (an escalation)
                        gone_a.append((f"item-a-{row.pk}", ""))
                    else:
                        gone_a.append((f"item-a-{row.pk}", self._settled_note(row)))
                unknowns = unknown_outcomes_for(tenant_ids=[tenant_id], settled=None).filter(
                    run_id__in=run_ids
                )
                matching = set(shown.unknowns(unknowns).values_list("pk", flat=True))
                for outcome in unknowns:
                    if outcome.settled:
                        gone_u.append((f"item-u-{outcome.pk}", self._settled_note(outcome)))
                    elif outcome.pk in matching:
                        upsert_u.append(self._unknown(outcome))
            context.update(
                {
                    "upsert_approvals": upsert_a,
                    "upsert_unknowns": upsert_u,
                    "gone_approvals": gone_a,
                    "gone_unknowns": gone_u,
                }
            )
        return render_to_string("approvals/_live.html", context)

    def _approval(self, row: Approval) -> InboxEntry:
        return approval_entry(row, role=self.tenants.get(row.tenant_id), username=self.username)

    def _unknown(self, row: UnknownOutcome) -> InboxEntry:
        return unknown_entry(row, role=self.tenants.get(row.tenant_id))

    def _settled_note(self, row: Approval | UnknownOutcome) -> str:
        """Who settled an item, for the 'settled elsewhere' flash; empty if it was this user."""
        if isinstance(row, Approval):
            if row.status == ApprovalStatus.EXPIRED:
                return f"{row.tool} in run {row.run_id} expired"
            if row.decided_by == self.username:
                return ""
            return f"{row.tool} in run {row.run_id} {row.status} by {row.decided_by or 'someone'}"
        if row.settled_by == self.username:
            return ""
        verdict = "executed" if row.executed else "not executed"
        return f"{row.tool} in run {row.run_id} reconciled as {verdict} by {row.settled_by or 'someone'}"
