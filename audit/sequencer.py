"""The sequencer: numbers pending events into each tenant's tree and signs due checkpoints.

Run by ``manage.py keelgate_sequencer`` (one per site is enough; more are safe). Each
tenant is sequenced in its own transaction under its head lock, taken without waiting
(``SKIP LOCKED``), so two sequencers never work on one tenant at once and a killed
one leaves nothing half done: its transaction is rolled back with its connection, and
the next pass numbers the same events. Checkpoints are signed from the head under the
same lock, at most every ``KEELGATE_AUDIT_CHECKPOINT_INTERVAL`` seconds per tenant.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Max, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit.checkpoints import sign_checkpoint
from audit.models import ChainHead, Checkpoint
from audit.tree import BATCH, pending_tenants
from audit.wiring import integrate_batch

__all__ = ["POLL_SECONDS", "serve", "tick", "unsigned_tenants"]

log = logging.getLogger("keelgate.audit.sequencer")


def unsigned_tenants() -> list[str]:
    """Tenants whose tree has grown past their newest checkpoint."""
    signed = (
        Checkpoint.objects.filter(tenant_id=OuterRef("tenant_id"))
        .order_by()
        .values("tenant_id")
        .annotate(size=Max("size"))
        .values("size")
    )
    heads = ChainHead.objects.annotate(signed=Coalesce(Subquery(signed), 0)).filter(seq__gt=F("signed"))
    return sorted(heads.values_list("tenant_id", flat=True))


def tick(
    *, every: timedelta | None = None, unsigned: bool = True, signed_at: dict[str, datetime] | None = None
) -> tuple[int, int]:
    """One pass over every tenant with pending events (and, with ``unsigned``, every tenant
    whose head has grown past its newest checkpoint, sequenced by someone else): (events
    sequenced, checkpoints signed). A checkpoint may follow each batch, so a backlog is
    signed as it is worked off, not only at its end.

    ``signed_at`` (kept by :func:`serve` from pass to pass) holds when this process last
    signed each tenant: one signed less than ``every`` ago is not asked again, as it is not
    due (its newest checkpoint is at least that young), and asking costs a transaction.
    """
    if every is None:
        every = timedelta(seconds=float(settings.KEELGATE_AUDIT_CHECKPOINT_INTERVAL))
    pending = set(pending_tenants())
    sequenced = signed = 0
    for tenant_id in sorted(pending | (set(unsigned_tenants()) if unsigned else set())):
        while True:
            n = integrate_batch(tenant_id) if tenant_id in pending else 0
            sequenced += n
            last = None if signed_at is None else signed_at.get(tenant_id)
            if last is None or timezone.now() - last >= every:
                checkpoint = sign_checkpoint(tenant_id, every=every, sequence=False)
                if checkpoint is not None:
                    if signed_at is not None:
                        signed_at[tenant_id] = checkpoint.signed_at
                    signed += 1
            if n < BATCH:
                break
    return sequenced, signed


POLL_SECONDS = 0.05
"""The rest between two passes: how long a committed event may wait to be looked for."""


def serve(stop: threading.Event, *, poll: float = POLL_SECONDS) -> None:
    """Pass after pass until ``stop`` is set, resting ``poll`` seconds after each.

    Appends do not wake the sequencer (``audit.store_postgresql``: a ``NOTIFY`` would make
    PostgreSQL commit them one at a time), so it looks for them: every pass drains each
    tenant's backlog, and the rest after it, even when it found work, lets the next batch
    gather, so a pass numbers many events for its fixed cost (its queries, its commit)
    instead of a few (docs/performance.md#audit-append).
    """
    every = float(settings.KEELGATE_AUDIT_CHECKPOINT_INTERVAL)
    looked = 0.0  # when the heads grown past their checkpoints were last looked for
    signed_at: dict[str, datetime] = {}
    while not stop.is_set():
        started = time.monotonic()
        try:
            # Heads sequenced by others (a reader, the console) are looked for once a
            # checkpoint interval, not every pass: that query reads every tenant's head.
            tick(unsigned=started - looked >= every, signed_at=signed_at)
            if started - looked >= every:
                looked = started
        except Exception:  # a broken pass must not end the sequencer: log it, try again
            log.exception("sequencer pass failed")
            connection.close()
        stop.wait(poll)
