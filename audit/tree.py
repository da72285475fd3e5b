"""Sequencing: events inserted by their writers become numbered leaves of the tenant's tree.

One transaction under the tenant's ``ChainHead`` row lock takes the tenant's pending
events (``PendingEvent``) in insertion order, writes them as numbered events after the
head with their leaf hashes, stores the complete subtrees they complete (``TreeNode``),
deletes them from the queue, and moves the head to the new size and root
(compare-and-set on the size it read). Writers never wait for it: an event commits with
the change it records, and whoever holds the lock next sequences it. Killed halfway, the
transaction leaves nothing: no gap, no leaf twice, no event lost.

This is the one implementation, on the ORM; both databases run it. What it writes goes
through a :data:`WriteBatch`, the ORM's by default (:func:`write_batch`); PostgreSQL's
wiring passes its own (``audit.store_postgresql.write_batch``: ``COPY``), the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from django.db import transaction

from audit.models import TREE_LEAF, ChainHead, PendingEvent, TreeNode
from audit.models import AuditEvent as EventRow
from keelgate.audit import GENESIS_HASH, HashReader, leaf_object, new_nodes, object_leaf_hash, tree_root

__all__ = [
    "BATCH",
    "Announce",
    "WriteBatch",
    "event_leaf",
    "integrate",
    "integrate_all",
    "lock_head",
    "node_reader",
    "pending_tenants",
    "write_batch",
]

BATCH = 2000
"""Events sequenced per transaction at most: bounds how long the lock is held."""

Announce = Callable[[str, int], None]
"""Told, inside the transaction, each tenant's new head: PostgreSQL's ``NOTIFY``."""

WriteBatch = Callable[[str, Sequence[EventRow], Sequence[tuple[int, int, bytes]], Sequence[int]], None]
"""Writes, inside the transaction, a tenant's batch: its numbered events, the subtrees they
complete (``(level, index, hash)``), and deletes the pending events they were (by id)."""


def write_batch(
    tenant_id: str,
    events: Sequence[EventRow],
    nodes: Sequence[tuple[int, int, bytes]],
    pending_ids: Sequence[int],
) -> None:
    """:data:`WriteBatch` on the ORM."""
    EventRow.objects.bulk_create(events, batch_size=500)
    TreeNode.objects.bulk_create(
        [TreeNode(tenant_id=tenant_id, level=lv, index=i, hash=h) for lv, i, h in nodes], batch_size=500
    )
    PendingEvent.objects.filter(id__in=pending_ids).delete()


def lock_head(tenant_id: str, *, wait: bool = True) -> ChainHead | None:
    """The tenant's head, locked until the transaction ends (created first if missing).

    With ``wait=False``, None when another transaction holds it (it is sequencing).
    Only a tenant's first event finds no row: the insert that leaves an existing one
    alone makes it, whoever wins, and the locking read then waits for the winner.
    """
    heads = ChainHead.objects.select_for_update(skip_locked=not wait)
    head = heads.filter(tenant_id=tenant_id).first()
    if head is None:
        ChainHead.objects.bulk_create(
            [ChainHead(tenant_id=tenant_id, seq=0, hash=GENESIS_HASH)], ignore_conflicts=True
        )
        head = heads.filter(tenant_id=tenant_id).first()
    return head


def node_reader(tenant_id: str, made: Mapping[tuple[int, int], bytes] | None = None) -> HashReader:
    """Reads the tenant's stored subtree hashes in one query (``made`` first: nodes of
    this transaction not yet written)."""

    def read(wanted: Sequence[tuple[int, int]]) -> list[bytes]:
        found = dict(made or {})
        missing = [node for node in wanted if node not in found]
        if missing:
            levels = {level for level, _ in missing}
            indexes = {index for _, index in missing}
            rows = TreeNode.objects.filter(tenant_id=tenant_id, level__in=levels, index__in=indexes)
            for level, index, hash_ in rows.values_list("level", "index", "hash"):
                found[(level, index)] = bytes(hash_)
        try:
            return [found[node] for node in wanted]
        except KeyError as exc:
            raise LookupError(f"tenant {tenant_id}: tree node {exc.args[0]} is missing") from exc

    return read


def event_leaf(row: EventRow, seq: int | None = None) -> dict[str, Any]:
    """The row's leaf object (:func:`keelgate.audit.leaf_object`), numbered ``seq``."""
    return leaf_object(
        version=row.version,
        tenant_id=row.tenant_id,
        seq=row.seq if seq is None else seq,
        at=row.at,
        actor=row.actor,
        kind=row.kind,
        body=json.loads(row.body),
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


def integrate(
    tenant_id: str, *, wait: bool = True, announce: Announce | None = None, write: WriteBatch = write_batch
) -> dict[int, EventRow]:
    """Sequence up to :data:`BATCH` of the tenant's pending events; the events it wrote,
    by the pending event's id, in order.

    With ``wait=False`` it returns at once, empty, if another transaction holds the
    tenant (that one sequences them). Joins the caller's transaction if there is one.
    """
    with transaction.atomic():
        head = lock_head(tenant_id, wait=wait)
        if head is None:
            return {}
        pending = list(PendingEvent.objects.filter(tenant_id=tenant_id).order_by("id")[:BATCH])
        if not pending:
            return {}
        size = head.seq
        events = [_numbered(row, size + 1 + offset) for offset, row in enumerate(pending)]
        made = new_nodes(size, [bytes.fromhex(e.leaf_hash) for e in events], node_reader(tenant_id))
        new_size = size + len(events)
        root = tree_root(new_size, node_reader(tenant_id, {(lv, i): h for lv, i, h in made}))
        # Exactly the pending rows read are deleted: one committed meanwhile with a lower id
        # waits for the next batch.
        write(tenant_id, events, made, [row.id for row in pending])
        moved = ChainHead.objects.filter(tenant_id=tenant_id, seq=size).update(seq=new_size, root=root.hex())
        if moved != 1:  # the lock makes this impossible; refuse rather than fork the tree
            raise RuntimeError(f"tenant {tenant_id}: the log's head moved while it was locked")
        if announce is not None:
            announce(tenant_id, new_size)
    return {row.id: event for row, event in zip(pending, events, strict=True)}


def _numbered(row: PendingEvent, seq: int) -> EventRow:
    """The pending event as the log's event ``seq``, its leaf hashed."""
    event = EventRow(
        tenant_id=row.tenant_id,
        seq=seq,
        at=row.at,
        actor=row.actor,
        kind=row.kind,
        body=row.body,
        run_id=row.run_id,
        tool=row.tool,
        version=TREE_LEAF,
    )
    event.leaf_hash = object_leaf_hash(event_leaf(event)).hex()
    return event


def integrate_all(
    tenant_ids: Iterable[str] | None = None,
    *,
    wait: bool = False,
    drain: bool = True,
    announce: Announce | None = None,
    write: WriteBatch = write_batch,
) -> int:
    """:func:`integrate` for each of ``tenant_ids`` with pending events (default: every
    tenant that has some), batch after batch unless ``drain`` is off; how many it numbered."""
    done = 0
    for tenant_id in pending_tenants(tenant_ids):
        while True:
            n = len(integrate(tenant_id, wait=wait, announce=announce, write=write))
            done += n
            if n < BATCH or not drain:
                break
    return done


def pending_tenants(among: Iterable[str] | None = None) -> list[str]:
    """Tenants (of ``among``, if given) with events waiting to be sequenced: one query
    the partial index answers."""
    rows = PendingEvent.objects.all()
    if among is not None:
        rows = rows.filter(tenant_id__in=list(among))
    return sorted(set(rows.order_by().values_list("tenant_id", flat=True).distinct()))
