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
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Max, OuterRef, Subquery
from django.db.models.functions import Coalesce

from audit.checkpoints import sign_checkpoint
from audit.models import ChainHead, Checkpoint
from audit.tree import BATCH, pending_tenants
from audit.wiring import integrate_pending

__all__ = ["serve", "tick", "unsigned_tenants"]

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


def tick(*, every: timedelta | None = None) -> tuple[int, int]:
    """One pass over every tenant with pending events or an unsigned head: (events
    sequenced, checkpoints signed). A checkpoint may follow each batch, so a backlog is
    signed as it is worked off, not only at its end."""
    if every is None:
        every = timedelta(seconds=float(settings.KEELGATE_AUDIT_CHECKPOINT_INTERVAL))
    sequenced = signed = 0
    for tenant_id in sorted(set(pending_tenants()) | set(unsigned_tenants())):
        while True:
            n = integrate_pending([tenant_id], drain=False)
            sequenced += n
            signed += sign_checkpoint(tenant_id, every=every, sequence=False) is not None
            if n < BATCH:
                break
    return sequenced, signed


def serve(stop: threading.Event, *, poll: float = 0.1) -> None:
    """Pass after pass until ``stop`` is set, resting ``poll`` seconds when idle."""
    while not stop.is_set():
        try:
            sequenced, _ = tick()
        except Exception:  # a broken pass must not end the sequencer: log it, try again
            log.exception("sequencer pass failed")
            connection.close()
            sequenced = 0
        if not sequenced:
            stop.wait(poll)
