"""The durable idempotency store: the second line of defence against a repeated WRITE."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

__all__ = ["ClaimStatus", "IdempotencyRecord", "IdempotencyStore", "KeyStatus"]


class KeyStatus(StrEnum):
    """Where a key stands in the store."""

    IN_FLIGHT = "in_flight"
    """Claimed by an owner whose call has not reported back."""
    COMPLETED = "completed"
    """The call returned; its outcome is stored and is replayed, never re-run."""
    ABANDONED = "abandoned"
    """Settled as not executed; never attempted again under this key."""


class ClaimStatus(StrEnum):
    """What :meth:`IdempotencyStore.claim` found."""

    CLAIMED = "claimed"
    """The key was new: the caller now owns it and may run the call."""
    COMPLETED = "completed"
    """Already done: replay ``record.outcome``, run nothing."""
    IN_FLIGHT = "in_flight"
    """Someone claimed it and never reported back: the outcome is unknown."""
    ABANDONED = "abandoned"
    """Settled as not executed: do not run it under this key."""


class IdempotencyRecord(BaseModel):
    """One key as stored. ``outcome`` is an ``ActionOutcome`` as JSON text, or None."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    key: str
    status: KeyStatus
    owner: str
    run_id: str
    action_id: str
    claimed_at: datetime
    lease_expires_at: datetime
    completed_at: datetime | None = None
    outcome: str | None = None
    settled_by: str | None = None


@runtime_checkable
class IdempotencyStore(Protocol):
    """Durable record of every side-effecting call, keyed per tenant.

    Contract:

    - ``claim`` is atomic: of any number of concurrent claims of one new key (threads
      or processes), exactly one gets ``CLAIMED``; the others see the stored record.
      A claim never changes an existing record.
    - ``complete`` stores the outcome only if the key is ``in_flight`` under the same
      ``owner``; otherwise it raises :class:`~keelgate.errors.KeyNotOwnedError` and
      changes nothing (a fenced-off owner cannot overwrite a settlement).
    - ``settle`` is the reconcile path: an ``in_flight`` key (any owner) becomes
      ``completed`` (``executed=True``, with ``outcome``) or ``abandoned``; any other
      status raises :class:`~keelgate.errors.KeyNotOwnedError`.
    - Keys are scoped by tenant: the same key in two tenants is two records, and
      ``get`` never returns another tenant's record.
    - Every method that changes a record has committed durably when it returns.
    - Optionally a :class:`~keelgate.commits.GroupedStore`: a ``commit_group`` shared
      with the other stores of one transaction lets the loop commit their writes
      together at its barriers; without one, every write commits alone.
    """

    def claim(
        self,
        tenant_id: str,
        key: str,
        *,
        owner: str,
        run_id: str,
        action_id: str,
        now: datetime,
        lease_seconds: float,
    ) -> tuple[ClaimStatus, IdempotencyRecord]:
        """Claim ``key`` for ``owner`` if it is new; otherwise report what is stored."""
        ...

    def complete(
        self, tenant_id: str, key: str, *, owner: str, outcome: str, now: datetime
    ) -> IdempotencyRecord:
        """Record the call's outcome (JSON text). Raises if ``owner`` does not hold the key."""
        ...

    def settle(
        self,
        tenant_id: str,
        key: str,
        *,
        executed: bool,
        by: str,
        outcome: str | None,
        now: datetime,
    ) -> IdempotencyRecord:
        """Settle an in-flight key as completed or abandoned (reconcile)."""
        ...

    def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The stored record, or None."""
        ...
