"""An idempotency store held in process memory, for tests and single-process demos."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from keelgate.errors import KeyNotOwnedError
from keelgate.idempotency._protocol import ClaimStatus, IdempotencyRecord, KeyStatus

__all__ = ["InMemoryIdempotencyStore"]

_CLAIM_STATUS = {
    KeyStatus.IN_FLIGHT: ClaimStatus.IN_FLIGHT,
    KeyStatus.COMPLETED: ClaimStatus.COMPLETED,
    KeyStatus.ABANDONED: ClaimStatus.ABANDONED,
}
"""What a claim reports for each stored status."""


def require_aware(now: datetime) -> datetime:
    """Refuse a naive datetime: it would not compare with the aware ones already stored."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    return now


def claim_status_of(record: IdempotencyRecord) -> ClaimStatus:
    """The claim result for a key that already exists."""
    return _CLAIM_STATUS[record.status]


class InMemoryIdempotencyStore:
    """:class:`~keelgate.idempotency.IdempotencyStore` in a dict, guarded by one lock.

    Not durable across processes: it is the test double, and the reference for what
    the contract means. Every method holds the lock for its whole read-check-write, so
    threads see the same atomicity a database transaction gives.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], IdempotencyRecord] = {}

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
        require_aware(now)
        with self._lock:
            existing = self._records.get((tenant_id, key))
            if existing is not None:
                return claim_status_of(existing), existing
            record = IdempotencyRecord(
                tenant_id=tenant_id,
                key=key,
                status=KeyStatus.IN_FLIGHT,
                owner=owner,
                run_id=run_id,
                action_id=action_id,
                claimed_at=now,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
            )
            self._records[(tenant_id, key)] = record
            return ClaimStatus.CLAIMED, record

    def complete(
        self, tenant_id: str, key: str, *, owner: str, outcome: str, now: datetime
    ) -> IdempotencyRecord:
        """Record the call's outcome (JSON text). Raises if ``owner`` does not hold the key."""
        require_aware(now)
        with self._lock:
            existing = self._records.get((tenant_id, key))
            if existing is None or existing.status is not KeyStatus.IN_FLIGHT or existing.owner != owner:
                raise KeyNotOwnedError(key)
            record = existing.model_copy(
                update={"status": KeyStatus.COMPLETED, "outcome": outcome, "completed_at": now}
            )
            self._records[(tenant_id, key)] = record
            return record

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
        require_aware(now)
        with self._lock:
            existing = self._records.get((tenant_id, key))
            if existing is None or existing.status is not KeyStatus.IN_FLIGHT:
                raise KeyNotOwnedError(key)
            record = existing.model_copy(
                update={
                    "status": KeyStatus.COMPLETED if executed else KeyStatus.ABANDONED,
                    "outcome": outcome,
                    "completed_at": now,
                    "settled_by": by,
                }
            )
            self._records[(tenant_id, key)] = record
            return record

    def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The stored record, or None."""
        with self._lock:
            return self._records.get((tenant_id, key))
