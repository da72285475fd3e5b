"""Which audit log the site writes with, and who sequences: the one place that picks them.

PostgreSQL gets its own log (:mod:`audit.store_postgresql`), whose appends only insert;
every other database runs the readable default on the ORM (:mod:`audit.store`), whose
appends sequence at once. Both keep the same rows, so reads, sequencing
(:mod:`audit.tree`) and verification are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import DEFAULT_DB_ALIAS, connections

from audit.store import DjangoAuditLog
from audit.store_postgresql import PostgresAuditLog, announce, write_batch
from audit.tree import integrate, integrate_all
from keelgate.clock import Clock
from sitekit.commits import DjangoCommitGroup

__all__ = ["audit_log", "integrate_batch", "integrate_pending"]


def _on_postgresql() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def audit_log(*, group: DjangoCommitGroup | None = None, clock: Clock | None = None) -> DjangoAuditLog:
    """The audit log on the default database, writing through ``group`` if given."""
    if _on_postgresql():
        return PostgresAuditLog(group=group, clock=clock)
    return DjangoAuditLog(group=group, clock=clock)


def integrate_pending(
    tenant_ids: Iterable[str] | None = None, *, wait: bool = False, drain: bool = True
) -> int:
    """Sequence what is pending for ``tenant_ids`` (default: every tenant with pending
    events); how many events it numbered. Without ``drain``, one batch per tenant.

    Without ``wait`` a tenant another transaction is sequencing is skipped: that one
    numbers its events. Readers call this first, so a committed event is never missing
    from what they read even when no sequencer runs.
    """
    if not _on_postgresql():
        return 0  # the ORM store numbers each event in its writer's transaction: none wait
    return integrate_all(tenant_ids, wait=wait, drain=drain, announce=announce, write=write_batch)


def integrate_batch(tenant_id: str) -> int:
    """Sequence one batch of the tenant's pending events, not asking first whether it has
    any (the sequencer has asked for every tenant at once); how many it numbered. Skips a
    tenant another transaction is sequencing."""
    if not _on_postgresql():
        return 0
    return len(integrate(tenant_id, wait=False, announce=announce, write=write_batch))
