"""Commit grouping: fewer fsyncs per step, the same guarantees.

A step writes a checkpoint, audit events and idempotency keys. When the three stores
write through one transaction (one SQLite file, one Django database), the loop holds
a :class:`CommitGroup` while it drives a run and flushes it at every *barrier*: before
anything outside the process runs (a planner, a tool, a verifier, a confirmer, a
context source), right after a plan (paid for, and write-ahead), and right after a
WRITE's key is completed. Between barriers nothing can observe the pending writes, so
a crash loses only work that had no effect outside and is simply redone on resume.
Stores on separate files each commit on their own, exactly as before.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["NO_GROUP", "CommitGroup", "shared_group"]

_METHODS = ("hold", "flush", "release", "discard")


class CommitGroup(Protocol):
    """Writes made by the holder between :meth:`hold` and :meth:`release` share commits."""

    def hold(self) -> None:
        """Start grouping the caller's writes."""

    def flush(self) -> None:
        """Make every grouped write durable now (a barrier)."""

    def release(self) -> None:
        """Flush, and stop grouping."""

    def discard(self) -> None:
        """Drop the unflushed writes and stop grouping: what a process death does to them."""


class _NoGroup:
    """Stores that cannot share a transaction: every write already commits on its own."""

    def hold(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def release(self) -> None:
        pass

    def discard(self) -> None:
        pass


NO_GROUP: CommitGroup = _NoGroup()


def shared_group(*stores: object) -> CommitGroup:
    """The commit group every store writes through, or :data:`NO_GROUP` if they differ.

    A store offers one as its ``commit_group`` attribute; grouping is only safe when
    all of them write through the very same transaction.
    """
    groups = [getattr(store, "commit_group", None) for store in stores]
    first = groups[0]
    if first is None or any(g is not first for g in groups):
        return NO_GROUP
    if not all(callable(getattr(first, name, None)) for name in _METHODS):
        return NO_GROUP
    group: CommitGroup = first
    return group
