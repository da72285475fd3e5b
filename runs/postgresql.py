"""The runs app's statement on PostgreSQL outside the engine's stores: the worker's claim.

``runs.services.run_claim`` says in ORM terms what a claim does (pick the oldest
runnable run under a lock that skips the runs other workers are claiming, then move it
to RUNNING for the worker with a new lease epoch); on PostgreSQL it is this one
statement, sent by the claim's commit group with its ``BEGIN``: a worker's claim costs
one round trip, and its audit event goes with the commit.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import connection

from runs.models import Run, RunStatus
from sitekit.commits import DjangoCommitGroup
from sitekit.db import converted_rows, quoted_column
from sitekit.postgresql.rows import db_values


def claim(
    group: DjangoCommitGroup, *, owner: str, now: datetime, lease_until: datetime, columns: tuple[str, ...]
) -> dict[str, Any] | None:
    """Pick and move the oldest runnable run for ``owner``; its ``columns`` as moved, or None."""
    sets = dict(zip(_CLAIM_SETS, (RunStatus.RUNNING, now, owner, lease_until), strict=True))
    params = [
        *db_values(Run, sets),
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        *db_values(Run, {"updated_at": now}),
    ]
    rows = converted_rows(Run, columns, group.query(_claim_sql(columns), params).rows)
    return rows[0] if rows else None


_CLAIM_SETS = ("status", "updated_at", "lease_owner", "lease_expires_at")


@functools.cache
def _claim_sql(columns: tuple[str, ...]) -> str:
    table = connection.ops.quote_name(Run._meta.db_table)

    def col(name: str) -> str:
        return quoted_column(Run, name)

    sets = ", ".join(f"{col(n)} = %s" for n in _CLAIM_SETS)
    return (
        f"UPDATE {table} SET {sets}, {col('lease_epoch')} = {col('lease_epoch')} + 1,"
        f" {col('attempts')} = {col('attempts')} + 1"
        f" WHERE {col('id')} = (SELECT {col('id')} FROM {table}"
        f" WHERE {col('status')} = %s OR ({col('status')} = %s AND {col('lease_expires_at')} < %s)"
        f" ORDER BY {col('updated_at')}, {col('id')} LIMIT 1 FOR UPDATE SKIP LOCKED)"
        f" RETURNING {', '.join(col(n) for n in columns)}"
    )
