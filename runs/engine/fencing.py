"""Fencing tokens: a worker's writes count only while its lease epoch is current.

Every claim of a run bumps ``Run.lease_epoch``. A worker passes its epoch to its stores,
and each checkpoint save, key claim and key completion re-reads the epoch under a row
lock in the same transaction as the write. A worker that was frozen (SIGSTOP, a long
GC pause) past its lease and woke after another took over is refused with
:class:`~keelgate.errors.LeaseLostError` instead of overwriting newer work.

On PostgreSQL the server checks it (``runs.engine.stores_postgresql.ServerFence``).
"""

from __future__ import annotations

from dataclasses import dataclass

from keelgate.errors import LeaseLostError
from runs.models import Run
from sitekit.commits import DjangoCommitGroup
from sitekit.db import unique_or_none


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


def check_fence(fence: Fence | None) -> None:
    """Raise LeaseLostError unless ``fence`` is still the run's current epoch.

    Call inside the write's transaction: on PostgreSQL the row lock makes the check and
    the write atomic against a concurrent claim; SQLite's IMMEDIATE transactions
    serialise all writers anyway.
    """
    if fence is None:
        return
    run = Run.objects.select_for_update().filter(tenant_id=fence.tenant_id, run_id=fence.run_id)
    epoch = unique_or_none(run.values_list("lease_epoch", flat=True))
    if epoch != fence.epoch:
        raise LeaseLostError(f"{fence.run_id} epoch {fence.epoch} is not {epoch}")
