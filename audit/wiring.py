"""Which audit log the site writes with: the one place that picks it.

PostgreSQL gets its own implementation (:mod:`audit.store_postgresql`); every other
database runs the readable default on the ORM (:mod:`audit.store`). Both keep the same
rows, so reads and verification are the same everywhere.
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections

from audit.store import DjangoAuditLog
from audit.store_postgresql import PostgresAuditLog
from keelgate.clock import Clock
from sitekit.commits import DjangoCommitGroup


def audit_log(*, group: DjangoCommitGroup | None = None, clock: Clock | None = None) -> DjangoAuditLog:
    """The audit log on the default database, writing through ``group`` if given."""
    if connections[DEFAULT_DB_ALIAS].vendor == "postgresql":
        return PostgresAuditLog(group=group, clock=clock)
    return DjangoAuditLog(group=group, clock=clock)
