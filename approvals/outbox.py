"""The transactional outbox: tail each watched tenant's audit chain, fan new events out.

Every state change (a worker's checkpoint, a person's decision) writes its audit event
in the same transaction, so the chain *is* the outbox: an event becomes visible exactly
when its change commits, whichever process made it. Nothing is sent for a change that
rolled back, and nothing is lost if the process that made the change dies right after.

One :class:`OutboxTailer` runs per server process, as an asyncio task on the process's
event loop: the first websocket consumer starts it and it stops when the last one
leaves. It reads only the chains of tenants someone in this process is watching, and
sends an :class:`~approvals.events.OutboxBatch` to the tenant's channel-layer group.

- PostgreSQL: it ``LISTEN``s on ``keelgate_audit`` (sequencing ``NOTIFY``s
  ``"tenant:seq"`` at commit) and wakes at once; a slow poll is the safety net for a
  dropped connection. Every ``KEELGATE_OUTBOX_PENDING_POLL_SECONDS`` it also asks
  which of the tenants it watches have events inserted, not yet numbered, and
  sequences them itself (:func:`audit.wiring.integrate_pending`, never waiting for a
  sequencer at work), so a browser sees a decision within that time even while no
  ``keelgate_sequencer`` runs. An append does not ``NOTIFY`` for this: PostgreSQL
  would commit every such append after the one before it has reached the disk
  (``audit.store_postgresql``).
- SQLite: it polls the watched tenants' head rows every ``KEELGATE_OUTBOX_POLL_SECONDS``.

Delivery is at least once and may repeat or drop: several processes may send the same
batch to a shared (Redis) group, and a full channel layer may drop one. Consumers treat
a batch as a hint: they ignore numbers they have seen and read any gap from the chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections

from approvals import postgresql
from approvals.events import OutboxBatch, OutboxItem, tenant_group
from audit.models import AuditEvent
from audit.selectors import audit_heads
from audit.store import NOTIFY_CHANNEL
from audit.wiring import integrate_pending

log = logging.getLogger("keelgate.outbox")

MAX_ITEMS = 200
"""A batch lists at most this many events; beyond it receivers re-read the inbox."""


def poll_seconds() -> float:
    """How often the SQLite tailer looks at the head rows."""
    return float(getattr(settings, "KEELGATE_OUTBOX_POLL_SECONDS", 0.2))


def safety_poll_seconds() -> float:
    """How often the PostgreSQL tailer polls although nothing was notified."""
    return float(getattr(settings, "KEELGATE_OUTBOX_SAFETY_POLL_SECONDS", 5.0))


def pending_poll_seconds() -> float:
    """How often the PostgreSQL tailer looks for its tenants' events not yet numbered."""
    return float(getattr(settings, "KEELGATE_OUTBOX_PENDING_POLL_SECONDS", 0.05))


# -- reads (sync, run in a thread) ----------------------------------------------------


def read_items(tenant_id: str, after_seq: int, limit: int = MAX_ITEMS) -> tuple[list[OutboxItem], bool]:
    """The tenant's events after ``after_seq``, oldest first, and whether that is all of them."""
    rows = list(
        AuditEvent.objects.filter(tenant_id=tenant_id, seq__gt=after_seq)
        .order_by("seq")
        .values_list("seq", "kind", "actor", "body")[: limit + 1]
    )
    items = [_item(seq, kind, actor, body) for seq, kind, actor, body in rows[:limit]]
    return items, len(rows) <= limit


async def read_items_on(conn: Any, tenant_id: str, after_seq: int) -> tuple[list[OutboxItem], bool]:
    """:func:`read_items` on the tailer's own psycopg connection (PostgreSQL)."""
    cursor = await conn.execute(postgresql.TAIL_EVENTS, (tenant_id, after_seq, MAX_ITEMS + 1))
    rows = await cursor.fetchall()
    items = [_item(seq, kind, actor, body) for seq, kind, actor, body in rows[:MAX_ITEMS]]
    return items, len(rows) <= MAX_ITEMS


async def pending_on(conn: Any, tenant_ids: list[str]) -> list[str]:
    """Which of ``tenant_ids`` have events inserted, not yet numbered, on the tailer's connection."""
    cursor = await conn.execute(postgresql.TAIL_PENDING, (tenant_ids,))
    return [tenant_id for (tenant_id,) in await cursor.fetchall()]


async def heads_on(conn: Any, tenant_ids: list[str]) -> dict[str, int]:
    """:func:`audit.selectors.audit_heads` on the tailer's own psycopg connection."""
    cursor = await conn.execute(postgresql.TAIL_HEADS, (tenant_ids,))
    found = {tenant_id: int(seq) for tenant_id, seq in await cursor.fetchall()}
    return {t: found.get(t, 0) for t in tenant_ids}


def _item(seq: int, kind: str, actor: str, body: str) -> OutboxItem:
    try:
        data = json.loads(body)
    except ValueError:  # a damaged row is the verifier's business, not the inbox's
        data = {}
    run_id = data.get("run_id") if isinstance(data, dict) else None
    action_id = data.get("action_id") if isinstance(data, dict) else None
    return OutboxItem(
        seq=seq,
        kind=kind[:64],
        actor=actor[:200],
        run_id=run_id if isinstance(run_id, str) and len(run_id) <= 128 else None,
        action_id=action_id if isinstance(action_id, str) and len(action_id) <= 64 else None,
    )


# -- the tailer ------------------------------------------------------------------------


class OutboxTailer:
    """Tails the chains of watched tenants and sends each new stretch to the tenant's group."""

    def __init__(self, *, layer: Any = None, listen: bool | None = None) -> None:
        self.layer = layer
        self.listen = listen
        self.watchers: Counter[str] = Counter()
        self.heads: dict[str, int] = {}
        """The last number sent (or the baseline) per watched tenant."""
        self.task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sent_batches = 0
        self.reader: Any = None
        """On PostgreSQL, the tailer's own connection for its reads (see :meth:`_listen_loop`)."""
        self._sequencing: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- watching -------------------------------------------------------------

    def watch(self, heads: Mapping[str, int]) -> None:
        """Watch these tenants; ``heads`` is what the caller already knows (the baseline).

        Must be called on the event loop that runs the tailer.
        """
        for tenant_id, seq in heads.items():
            if self.watchers[tenant_id] == 0:
                self.heads[tenant_id] = seq
            self.watchers[tenant_id] += 1
        if self.task is None or self.task.done():
            self.loop = asyncio.get_running_loop()
            self.task = self.loop.create_task(self._run(), name="keelgate-outbox-tailer")

    def unwatch(self, tenant_ids: Iterable[str]) -> None:
        """Stop watching; the tailer stops when nobody in this process watches anything."""
        for tenant_id in tenant_ids:
            self.watchers[tenant_id] -= 1
            if self.watchers[tenant_id] <= 0:
                del self.watchers[tenant_id]
                self.heads.pop(tenant_id, None)
        if not self.watchers and self.task is not None:
            self.task.cancel()
            self.task = None

    async def stop(self) -> None:
        """Cancel the task and wait for it (tests, shutdown)."""
        task, self.task = self.task, None
        self.watchers.clear()
        self.heads.clear()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- running ------------------------------------------------------------------

    async def _run(self) -> None:
        if self.layer is None:
            self.layer = get_channel_layer()
        listen = self.listen if self.listen is not None else connections["default"].vendor == "postgresql"
        while True:
            try:
                if listen:
                    await self._listen_loop()
                else:
                    await self._poll_loop(poll_seconds())
            except asyncio.CancelledError:
                raise
            except Exception:
                # A database or channel-layer hiccup must not end live updates for good:
                # consumers fill any gap from the chain, so retrying is always safe.
                log.exception("outbox tailer failed; retrying in 1s")
                await asyncio.sleep(1.0)

    async def _poll_loop(self, interval: float) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(interval)

    async def _listen_loop(self) -> None:
        import psycopg

        # Reads go over a second connection of the tailer's own, kept open while it
        # runs: through Django each read was a thread hop and, without persistent
        # connections, a new connection (much of a notified batch's time in Daphne).
        # The LISTEN connection cannot run them: its notification loop holds it. No
        # automatic prepare: psycopg prepares a query at its fifth run, and that batch
        # arrived late behind many sockets, every time (docs/performance.md#outbox-tailer).
        async with (
            await psycopg.AsyncConnection.connect(**_conninfo(), autocommit=True) as conn,
            await psycopg.AsyncConnection.connect(
                **_conninfo(), autocommit=True, prepare_threshold=None
            ) as reader,
        ):
            await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self.reader = reader
            clock = asyncio.get_running_loop().time
            try:
                await self.tick()  # what committed before LISTEN took effect
                safety = clock() + safety_poll_seconds()
                while True:
                    async for note in conn.notifies(timeout=pending_poll_seconds()):
                        tenant_id, _, seq = note.payload.rpartition(":")
                        last = self.heads.get(tenant_id)
                        if last is not None and seq.isdigit() and int(seq) > last:
                            await self.advance(tenant_id)
                    if self.heads:
                        for tenant_id in await pending_on(reader, list(self.heads)):
                            self._sequence_soon(tenant_id)
                    if clock() >= safety:
                        await self.tick()
                        safety = clock() + safety_poll_seconds()
            finally:
                self.reader = None

    def _sequence_soon(self, tenant_id: str) -> None:
        """Sequence the tenant's pending events in a thread; its NOTIFY wakes this loop."""
        if tenant_id in self._sequencing:
            return
        self._sequencing.add(tenant_id)

        async def sequence() -> None:
            try:
                await database_sync_to_async(integrate_pending)([tenant_id])
            except Exception:  # the sequencer or the next reader numbers them
                log.exception("sequencing %s from the outbox failed", tenant_id)
            finally:
                self._sequencing.discard(tenant_id)

        task = asyncio.get_running_loop().create_task(sequence())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def tick(self) -> None:
        """Look at every watched tenant's head row; send whatever is new."""
        if not self.heads:
            return
        heads = await self._heads(list(self.heads))
        for tenant_id, seq in heads.items():
            last = self.heads.get(tenant_id)
            if last is not None and seq > last:
                await self.advance(tenant_id)

    async def advance(self, tenant_id: str) -> None:
        """Send the tenant's events after the last one sent, as one batch."""
        last = self.heads.get(tenant_id)
        if last is None:
            return
        if self.reader is not None:
            items, complete = await read_items_on(self.reader, tenant_id, last)
        else:
            items, complete = await database_sync_to_async(read_items, thread_sensitive=False)(
                tenant_id, last
            )
        if not items or tenant_id not in self.heads:
            return
        if complete:
            last_seq = items[-1].seq
        else:
            last_seq = (await self._heads([tenant_id]))[tenant_id]
            items = []
        self.heads[tenant_id] = last_seq
        batch = OutboxBatch(
            tenant_id=tenant_id, first_seq=last + 1, last_seq=last_seq, items=items, complete=complete
        )
        await self.layer.group_send(tenant_group(tenant_id), batch.model_dump(mode="json"))
        self.sent_batches += 1

    async def _heads(self, tenant_ids: list[str]) -> dict[str, int]:
        if self.reader is not None:
            return await heads_on(self.reader, tenant_ids)
        heads: dict[str, int] = await database_sync_to_async(audit_heads, thread_sensitive=False)(tenant_ids)
        return heads


def _conninfo() -> dict[str, Any]:
    """psycopg keyword arguments for a LISTEN connection to the default database."""
    db = connections["default"].settings_dict
    params: dict[str, Any] = {"dbname": db["NAME"], "connect_timeout": 5}
    for key, name in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"), ("PORT", "port")):
        if db.get(key):
            params[name] = db[key]
    for key, value in (db.get("OPTIONS") or {}).items():
        if key in {"sslmode", "sslrootcert", "sslcert", "sslkey", "application_name", "options"}:
            params[key] = value
    return params


_tailer: OutboxTailer | None = None


def tailer() -> OutboxTailer:
    """This process's tailer, on the running event loop (tests run each test on a new loop)."""
    global _tailer
    loop = asyncio.get_running_loop()
    if _tailer is None or (_tailer.loop is not None and _tailer.loop is not loop):
        _tailer = OutboxTailer()
    return _tailer
