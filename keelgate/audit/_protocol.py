"""The audit chain: append-only, one hash chain per tenant."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from keelgate.audit._event import AuditEvent

__all__ = ["AuditLog", "RecordingAuditLog"]


@runtime_checkable
class AuditLog(Protocol):
    """An append-only, per-tenant hash chain of events.

    Contract:

    - ``append`` assigns the next sequence number of the tenant's chain (1, 2, 3, ...
      with no gap), links the event to the previous one's hash and commits durably
      before returning. Appends to one tenant are serialised, so two writers (threads
      or processes) can never fork the chain or reuse a number.
    - ``body`` must be JSON-serialisable; it is stored canonically.
    - ``events`` yields a tenant's events in sequence order, starting after
      ``after_seq``; another tenant's events never appear.
    - ``head`` is the last event of the tenant's chain, or None for an empty chain.
    - Optionally a :class:`~keelgate.commits.GroupedStore`: a ``commit_group`` shared
      with the other stores of one transaction lets the loop commit their writes
      together at its barriers; without one, every write commits alone.
    """

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event and return it as stored."""
        ...

    def events(self, tenant_id: str, *, after_seq: int = 0, limit: int | None = None) -> Iterator[AuditEvent]:
        """The tenant's events after ``after_seq``, oldest first."""
        ...

    def head(self, tenant_id: str) -> AuditEvent | None:
        """The newest event of the tenant's chain."""
        ...


@runtime_checkable
class RecordingAuditLog(Protocol):
    """An :class:`AuditLog` that can also append an event without answering with it.

    The loop and the gateway never look at the event they append, so they call
    ``record`` when a store offers it: a database store may then write the event with a
    later round trip and link it on the server, where the head is, instead of asking
    for the head first. Same contract as ``append`` otherwise: the same bytes, the same
    hash, one chain with no gap, durable once the store's commit is.
    """

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """Append one event; its number and hash are the store's to know."""
        ...
