"""An audit log in a dict: the test double, and the reference for the contract suite."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from keelgate.audit._event import GENESIS_HASH, AuditEvent, normalize_body
from keelgate.clock import Clock, SystemClock

__all__ = ["InMemoryAuditLog"]


class InMemoryAuditLog:
    """A per-tenant hash chain held in memory, safe to share between threads.

    ``_chains`` maps a tenant to its events in order. It is private but documented:
    tamper tests edit it directly to check that verification notices.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._chains: dict[str, list[AuditEvent]] = {}

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event and return it as stored.

        Raises TypeError or ValueError, appending nothing, when ``body`` is not JSON.
        """
        # Normalise outside the lock: a bad body fails before it could touch the chain.
        stored_body = normalize_body(body)
        with self._lock:
            chain = self._chains.setdefault(tenant_id, [])
            last = chain[-1] if chain else None
            event = AuditEvent.build(
                tenant_id=tenant_id,
                seq=last.seq + 1 if last is not None else 1,
                # Read inside the lock so times never run backwards along the chain.
                at=self._clock.now(),
                actor=actor,
                kind=kind,
                body=stored_body,
                prev_hash=last.hash if last is not None else GENESIS_HASH,
            )
            chain.append(event)
            return event

    def events(self, tenant_id: str, *, after_seq: int = 0, limit: int | None = None) -> Iterator[AuditEvent]:
        """The tenant's events after ``after_seq``, oldest first."""
        with self._lock:
            # A snapshot, so appends during iteration neither block nor disturb it.
            snapshot = list(self._chains.get(tenant_id, ()))
        return _select(snapshot, after_seq, limit)

    def head(self, tenant_id: str) -> AuditEvent | None:
        """The newest event of the tenant's chain."""
        with self._lock:
            chain = self._chains.get(tenant_id)
            return chain[-1] if chain else None


def _select(chain: list[AuditEvent], after_seq: int, limit: int | None) -> Iterator[AuditEvent]:
    # Filter by number, not index: a tampered list may not be numbered by position.
    remaining = limit
    for event in chain:
        if remaining is not None and remaining <= 0:
            return
        if event.seq <= after_seq:
            continue
        yield event
        if remaining is not None:
            remaining -= 1
