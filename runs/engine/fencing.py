"""Fencing tokens: a worker's writes count only while its lease epoch is current.

Every claim of a run bumps ``Run.lease_epoch``. A worker passes its epoch to its stores,
and each checkpoint save, key claim and key completion re-reads the epoch under a row
lock in the same transaction as the write. A worker that was frozen (SIGSTOP, a long
GC pause) past its lease and woke after another took over is refused with
:class:`~keelgate.errors.LeaseLostError` instead of overwriting newer work.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.db import connection

from keelgate.errors import LeaseLostError
from runs.models import Run
from sitekit.commits import DjangoCommitGroup


@dataclass(frozen=True)
class Fence:
    """The lease a worker holds on one run: the guard (``sitekit.commits.Guard``) of the
    worker's commit group, checked at each of its transactions' first write."""

    tenant_id: str
    run_id: str
    epoch: int

    def check(self, group: DjangoCommitGroup) -> None:
        """Raise LeaseLostError unless this is still the run's epoch (locked until the commit)."""
        check_fence(self)


@dataclass(frozen=True)
class ServerFence:
    """PostgreSQL: the fence checked by the server, in the message of the transaction's writes."""

    fence: Fence

    def check(self, group: DjangoCommitGroup) -> None:
        """Send the refusing check: a lost lease fails the whole transaction on the server."""
        group.send(*fence_refusing(self.fence))


def check_fence(fence: Fence | None) -> None:
    """Raise LeaseLostError unless ``fence`` is still the run's current epoch.

    Call inside the write's transaction: on PostgreSQL the row lock makes the check and
    the write atomic against a concurrent claim; SQLite's IMMEDIATE transactions
    serialise all writers anyway.
    """
    if fence is None:
        return
    with connection.cursor() as cursor:
        cursor.execute(fence_sql(), [fence.tenant_id, fence.run_id])
        row = cursor.fetchone()
    _compare(fence, None if row is None else row[0])


def _compare(fence: Fence, epoch: int | None) -> None:
    if epoch != fence.epoch:
        raise LeaseLostError(f"{fence.run_id} epoch {fence.epoch} is not {epoch}")


def fence_sql() -> str:
    """The run's epoch, locked until the commit: ``%s`` tenant, run."""
    return _lock_epoch(connection.vendor)


def fence_refusing(fence: Fence) -> tuple[str, list[Any]]:
    """PostgreSQL: lock the run's row and refuse on the server unless the epoch is ``fence``'s.

    Nothing is left to check on the client, so a transaction's commit can travel with
    it (``keelgate_refuse``, migration ``runs.0004``): a lost lease fails the statement,
    and the rest of its message, the commit included, is skipped.
    """
    params = [fence.tenant_id, fence.run_id, fence.epoch, f"{fence.run_id} epoch {fence.epoch} is not "]
    return _REFUSING_FENCE, params


_REFUSING_FENCE = (
    f'WITH f AS (SELECT "lease_epoch" FROM "{Run._meta.db_table}"'
    ' WHERE "tenant_id" = %s AND "run_id" = %s FOR UPDATE)'
    " SELECT CASE WHEN (SELECT lease_epoch FROM f) IS NOT DISTINCT FROM %s THEN 1"
    " ELSE keelgate_refuse('lease_lost', %s || coalesce((SELECT lease_epoch FROM f)::text, 'None')) END"
)


@functools.cache
def _lock_epoch(vendor: str) -> str:
    """Written by hand: this runs at every grouped transaction's first write."""
    qn = connection.ops.quote_name
    lock = " FOR UPDATE" if vendor == "postgresql" else ""  # SQLite: the IMMEDIATE transaction
    return (
        f"SELECT {qn('lease_epoch')} FROM {qn(Run._meta.db_table)}"
        f" WHERE {qn('tenant_id')} = %s AND {qn('run_id')} = %s{lock}"
    )
