"""Commit grouping: fewer fsyncs per step, the same guarantees.

A step writes a checkpoint, audit events and idempotency keys. When the three stores
write through one transaction (one SQLite file, one Django database), the loop holds
a :class:`CommitGroup` while it drives a run. It flushes it where a write must be
durable: right after a plan (paid for, and write-ahead), before a WRITE tool runs (its
key's claim), and right after a WRITE's key is completed. Before other code outside the
process runs (a planner, a READ tool, a verifier, a confirmer, a context source) it
passes a *barrier*: nothing may wait there holding a lock, so a group whose writes took
one (an open SQLite transaction, a PostgreSQL row lock) commits them, and a group whose
writes have not yet reached the database may keep them for its next flush. Between
flushes nothing can observe the pending writes, so a crash loses only work that had no
effect outside and is simply redone on resume.
Stores on separate files each commit on their own, exactly as before.

A store takes part by being a :class:`GroupedStore`: it offers the group its writes go
through as ``commit_group``. That attribute is part of every store protocol
(``CheckpointStore``, ``IdempotencyStore``, ``AuditLog``) as an optional extension: a
store without it simply commits each write alone.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["NO_GROUP", "CommitGroup", "GroupedStore", "shared_group"]


@runtime_checkable
class CommitGroup(Protocol):
    """Writes made by the holder between :meth:`hold` and :meth:`release` share commits."""

    def hold(self) -> None:
        """Start grouping the caller's writes."""

    def flush(self) -> None:
        """Make every grouped write durable now."""

    def barrier(self) -> None:
        """Outside code runs next: flush, unless the grouped writes hold nothing yet.

        Writes that have not reached the database (bound on the client, waiting to be
        sent) hold no lock, and may wait for the next flush; anything else is flushed.
        """

    def release(self) -> None:
        """Flush, and stop grouping."""

    def discard(self) -> None:
        """Drop the unflushed writes and stop grouping: what a process death does to them."""


@runtime_checkable
class GroupedStore(Protocol):
    """A store whose writes go through a :class:`CommitGroup` it shares with other stores.

    Two stores may only offer the same group if they write through the very same
    transaction (one SQLite connection, one Django database connection per thread):
    the loop then commits their writes together at its barriers.
    """

    @property
    def commit_group(self) -> CommitGroup:
        """The group this store's writes join while a loop holds it."""
        ...


class _NoGroup:
    """Stores that cannot share a transaction: every write already commits on its own."""

    def hold(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def barrier(self) -> None:
        pass

    def release(self) -> None:
        pass

    def discard(self) -> None:
        pass


NO_GROUP: CommitGroup = _NoGroup()


def shared_group(*stores: object) -> CommitGroup:
    """The commit group every store writes through, or :data:`NO_GROUP` if they differ.

    Grouping is only safe when all of them are :class:`GroupedStore` over the very same
    group (so the very same transaction).
    """
    groups = [store.commit_group if isinstance(store, GroupedStore) else None for store in stores]
    first = groups[0]
    if first is None or any(g is not first for g in groups) or not isinstance(first, CommitGroup):
        return NO_GROUP
    return first
