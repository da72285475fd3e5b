"""The engine's commit grouping (``keelgate.commits``) on the Django database.

A loop over the site's stores holds one :class:`DjangoCommitGroup`: between two barriers
its checkpoint saves, key claims and audit events run in one transaction, and the
holder's :class:`Guard` (a worker's lease fence, ``runs.engine.fencing``) is checked once
per transaction, under a row lock that lasts until the commit, instead of once per
write. Opened at the first write, never before: on SQLite an open transaction holds the
file's write lock, and a barrier (a planner or tool call) must never wait with it held.

This class is the readable default: every statement runs when it is written, as the
ORM runs it, and a barrier commits. On PostgreSQL the wiring
(``runs.engine.loops.commit_group``) hands out its subclass
:class:`sitekit.postgresql.commits.PostgresCommitGroup` instead, which sends the writes
nobody needs an answer to ahead, in one round trip with the next statement, with
``BEGIN`` and ``COMMIT`` in the same message.

The stores write through :meth:`DjangoCommitGroup.write` (one write, fenced, in the held
transaction or its own), and a service that changes several things at once opens
:meth:`DjangoCommitGroup.transaction` (a decision: the checkpoint, the inbox row, the
run's move and their audit events commit together or not at all).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model

from keelgate.commits import CommitGroup

__all__ = ["Check", "DjangoCommitGroup", "Guard", "Result", "RowWriter"]


@dataclass(frozen=True)
class Result:
    """What one statement answered: its row count and rows (empty without a result set)."""

    rowcount: int
    rows: list[tuple[Any, ...]]


Check = Callable[[Result], None]
"""Looks at a sent statement's result and raises if the write must not stand."""


class Guard(Protocol):
    """What a group checks once per transaction, at its first write (a worker's lease fence).

    ``check`` runs inside the transaction, before the write: it raises if the holder may
    no longer write (``keelgate.errors.LeaseLostError``), or sends through ``group`` a
    statement that makes the database refuse the whole transaction. Whatever it locks
    stays locked until the commit, so the check and every write after it are atomic
    against whoever would take the holder's place. The group itself knows nothing of
    runs or leases: the app that owns the guarded state injects it.
    """

    def check(self, group: DjangoCommitGroup) -> None:
        """Raise (or make the transaction fail) unless the holder may still write."""


@dataclass
class _Txn:
    """The group's open transaction on one thread."""

    atomic: Any
    conn: BaseDatabaseWrapper
    outermost: bool
    fenced: bool = False
    memo: dict[Any, Any] = field(default_factory=dict)
    failed: BaseException | None = None
    rollbacks: list[Callable[[], None]] = field(default_factory=list)
    """What to undo in memory if the transaction rolls back (:meth:`DjangoCommitGroup.on_rollback`)."""


class DjangoCommitGroup:
    """One database transaction per stretch between a loop's flushes.

    Writes by the holding thread join it; other threads (Django gives each its own
    connection) write as before. A write that raises inside the held transaction
    leaves the writes before it to the flush, as they would have been committed one
    by one; a failed check of a sent write, or a database error, aborts the whole
    transaction, and every later write of it raises the same error until it ends.
    """

    def __init__(self, guard: Guard | None = None) -> None:
        self.guard = guard
        self._local = threading.local()

    def _holds(self) -> int:
        return getattr(self._local, "holds", 0)

    def _txn(self) -> _Txn | None:
        return getattr(self._local, "txn", None)

    def _whole(self) -> bool:
        return bool(getattr(self._local, "whole", False))

    # -- keelgate.commits.CommitGroup ---------------------------------------------

    def hold(self) -> None:
        self._local.holds = self._holds() + 1

    def flush(self) -> None:
        if self._whole():
            return  # the block of :meth:`transaction` commits once, at its end
        txn = self._flushable()
        if txn is None:
            return
        if txn.failed is not None:
            self._end(txn, rollback=True)
            return
        try:
            self._send_all(txn)
        except BaseException:
            self._end(txn, rollback=True)
            raise
        self._end(txn, rollback=False)

    def barrier(self) -> None:
        """Outside code runs next: commit what this transaction wrote (it holds locks)."""
        if self._txn() is None or self._whole():
            return
        self.flush()

    def release(self) -> None:
        try:
            self.flush()
        finally:
            self._local.holds = self._holds() - 1

    def discard(self) -> None:
        txn = self._txn()
        self._drop_parked()
        try:
            if txn is not None:
                self._end(txn, rollback=True)
        finally:
            self._local.holds = self._holds() - 1

    # -- what the stores and services use ----------------------------------------

    @contextmanager
    def write(self) -> Iterator[None]:
        """One store write: fenced, inside the held transaction or in its own."""
        if self._holds():
            self._begin()
            yield
            return
        self.hold()
        try:
            self._begin()
            yield
        except BaseException:
            self.discard()
            raise
        self.release()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction for the block, begun now: the writes of every store inside it,
        however they group them, commit once, when it ends; an exception rolls them all back.

        For a service that changes several things at once (a decision: the checkpoint,
        the inbox row, the run's status and their audit events) with no outside code
        between them: the holds inside do not flush, barriers keep nothing back, and
        the commit goes in the message of the last writes.
        """
        if self._holds():
            raise RuntimeError("a transaction inside a held commit group")
        self.hold()
        self._local.whole = True
        try:
            self._begin()
            yield
        except BaseException:
            self._local.whole = False
            self.discard()
            raise
        self._local.whole = False
        self.release()

    @functools.cached_property
    def rows(self) -> RowWriter:
        """Row writes of a layer above, joining this group's transaction (``checkpoint_saved``)."""
        return RowWriter(self)

    @property
    def owns_transaction(self) -> bool:
        """Inside :meth:`write`: the group began the transaction, so only it can roll it back."""
        txn = self._txn()
        return txn is not None and txn.outermost

    def on_rollback(self, undo: Callable[[], None]) -> None:
        """Inside :meth:`write`: run ``undo`` if this transaction rolls back (or its parked
        writes are dropped), for a store's memory of what it wrote."""
        txn = self._txn()
        if txn is None:
            raise RuntimeError("on_rollback outside a write")
        txn.rollbacks.append(undo)

    @property
    def memo(self) -> dict[Any, Any]:
        """Facts true until the current transaction ends (the audit head it locked)."""
        txn = self._txn()
        if txn is None:
            raise RuntimeError("memo outside a write")
        return txn.memo

    def send(self, sql: str, params: Sequence[Any], check: Check | None = None) -> None:
        """A statement inside :meth:`write` whose result is only checked (by ``check``), at
        the latest before the commit. Here it runs at once."""
        txn = self._txn()
        if txn is not None and txn.failed is not None:
            raise txn.failed
        result = _execute(connections[DEFAULT_DB_ALIAS], sql, params)
        if check is not None:
            check(result)

    def query(self, sql: str, params: Sequence[Any], *, commit: bool = False) -> Result:
        """A statement whose answer is needed now, sent with every write waiting before it.

        ``commit``: the caller would flush right after the answer anyway; a group that can
        (PostgreSQL's) commits in the same message. Here it is a plain query.
        """
        txn = self._txn()
        if txn is not None and txn.failed is not None:
            raise txn.failed
        return _execute(connections[DEFAULT_DB_ALIAS], sql, params)

    # -- the transaction ----------------------------------------------------------

    def _new_txn(self, atomic: Any, conn: BaseDatabaseWrapper, outermost: bool) -> _Txn:
        return _Txn(atomic=atomic, conn=conn, outermost=outermost)

    def _begin(self) -> None:
        txn = self._txn()
        if txn is not None:
            if txn.failed is not None:
                raise txn.failed
        else:
            conn = connections[DEFAULT_DB_ALIAS]
            outermost = not conn.in_atomic_block
            atomic = transaction.atomic()
            atomic.__enter__()
            txn = self._local.txn = self._new_txn(atomic, conn, outermost)
            self._opened(txn)
        if txn.fenced or self.guard is None:
            return
        self.guard.check(self)
        txn.fenced = True  # what it locked stays locked until the commit

    def _opened(self, txn: _Txn) -> None:
        """A transaction was just opened (the PostgreSQL group takes up its parked writes)."""

    def _flushable(self) -> _Txn | None:
        """The transaction a flush commits (the PostgreSQL group opens one for parked writes)."""
        return self._txn()

    def _send_all(self, txn: _Txn) -> None:
        """Before the commit: what waits to be sent (nothing here: every write ran at once)."""

    def _drop_parked(self) -> None:
        """A discard drops writes parked at a barrier (none here: a barrier commits)."""

    def _end(self, txn: _Txn, *, rollback: bool) -> None:
        self._local.txn = None
        if rollback:
            transaction.set_rollback(True)
            run_all(txn.rollbacks)
        try:
            txn.atomic.__exit__(None, None, None)
        except BaseException:  # the commit itself failed: nothing of it stands
            if not rollback:
                run_all(txn.rollbacks)
            raise


_: type[CommitGroup] = DjangoCommitGroup  # the engine's protocol, checked by mypy


class RowWriter:
    """Writes to a model's rows that join a group's open transaction (inside its ``write``).

    What a layer above gets to write with inside a lower layer's transaction (the inbox,
    projected on ``runs.signals.checkpoint_saved``) and what a service moves a row with
    (``runs.services.run_move``): models and field values, never SQL. Here each is the
    ORM's statement, run at once; the PostgreSQL group's writer
    (:class:`sitekit.postgresql.rows.PostgresRowWriter`) sends the unanswered ones with
    the transaction's next round trip.
    """

    def __init__(self, group: DjangoCommitGroup) -> None:
        self.group = group

    def insert_missing(self, model: type[Model], key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        """Insert the row ``key`` + ``values`` unless a row with that (unique) ``key`` exists."""
        model._default_manager.bulk_create([model(**key, **values)], ignore_conflicts=True)

    def update_changed(self, model: type[Model], key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        """Set ``values`` on the row ``key`` only where one of them differs: a row already
        so is neither rewritten nor locked, so it never waits for (or holds up) a
        transaction that has it locked."""
        model._default_manager.filter(**key).exclude(**values).update(**values)

    def update(self, row: Model, values: Mapping[str, Any]) -> None:
        """Set ``values`` on ``row`` (a row this transaction holds locked) and on the stored row."""
        type(row)._default_manager.filter(pk=row.pk).update(**values)
        for name, value in values.items():
            setattr(row, name, value)

    def update_where(self, model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        """Set ``values`` on the rows matching ``where`` (lookups and expressions allowed);
        how many matched."""
        return int(model._default_manager.filter(**where).update(**values))


def run_all(undos: list[Callable[[], None]]) -> None:
    """Run each of ``undos`` (a rolled-back transaction's)."""
    for undo in undos:
        undo()


def _execute(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> Result:
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall() if cursor.description else []
        return Result(cursor.rowcount, rows)
