"""The commit group on PostgreSQL: a transaction's writes in one or two round trips.

Round trips are most of a step's cost on PostgreSQL. A write whose answer nobody needs
yet (the fence, a checkpoint insert, an audit row) is *sent*
(:meth:`PostgresCommitGroup.send`): it waits, with its parameters, and goes to the server
in one message with the next statement that needs an answer
(:meth:`PostgresCommitGroup.query`, any ORM query, or the commit). A sent write either
refuses itself on the server (``keelgate_refuse``, migration ``runs.0004``: a worker's
fence, its checkpoint save) or carries a check of its result, run as soon as the
answers are back and always before the commit; a refusal or a failed check rolls the
whole transaction back, and what a store remembered of its writes goes with it
(:meth:`~sitekit.commits.DjangoCommitGroup.on_rollback`). ``BEGIN`` travels with the
first message and ``COMMIT`` with the last one when no check is outstanding, so a
transaction of any size costs one or two round trips.

The batching and the prepared statements are psycopg's: a message is one
``Connection.pipeline()`` block (``BEGIN``, the writes, the statement that needs an
answer, ``COMMIT``, then one sync), and each statement goes with ``prepare=True``, so
psycopg parses and plans it once per connection, in the message that first uses it,
and executes it by name after. ``KEELGATE_DB_PREPARE=0`` turns preparing off for a
pooler that shares one server session between clients (PgBouncer in transaction mode):
there a session's prepared statements are not its own.

At a barrier (``keelgate.commits``: outside code runs next) writes that were only bound
on the client hold no lock, so :meth:`PostgresCommitGroup.barrier` parks them outside any
transaction and sends them with the next flush: the checkpoints a step saves before
its next plan commit with the plan, one fsync fewer per step. A crash meanwhile loses
them, as it loses any unflushed write; they had no effect outside and are redone.

Everything else (holds, flushes, the decision's whole transaction, rollbacks) is the
readable default's, :class:`sitekit.commits.DjangoCommitGroup`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from keelgate.errors import LeaseLostError, StaleCheckpointError, StoreError
from sitekit.commits import Check, DjangoCommitGroup, Result, RowWriter, _Txn, run_all
from sitekit.postgresql.rows import PostgresRowWriter

__all__ = ["PostgresCommitGroup"]


@dataclass
class _PgTxn(_Txn):
    """The open transaction, with what waits to be sent."""

    pending: list[tuple[str, Sequence[Any], Check | None]] = field(default_factory=list)
    sending: bool = False
    prepares: bool = False
    """Statements go prepared (``KEELGATE_DB_PREPARE``)."""


class PostgresCommitGroup(DjangoCommitGroup):
    """:class:`~sitekit.commits.DjangoCommitGroup` whose writes wait, bound, for the next
    statement that needs an answer, and go with it in one message."""

    def _txn(self) -> _PgTxn | None:
        return getattr(self._local, "txn", None)

    @functools.cached_property
    def rows(self) -> RowWriter:
        """Row writes sent with the transaction's messages (:mod:`sitekit.postgresql.rows`)."""
        return PostgresRowWriter(self)

    def barrier(self) -> None:
        """Outside code runs next: park what holds nothing yet, else flush.

        Writes waiting on the client, never sent (no ``BEGIN`` yet), hold no lock: they
        leave Django's transaction (so outside code on this connection runs as if they
        did not exist) and go with the next flush, saving its commit. Once anything was
        sent, the barrier flushes.
        """
        txn = self._txn()
        if txn is None or self._whole():
            return
        parkable = (
            txn.outermost and txn.failed is None and txn.conn.connection.info.transaction_status == _IDLE
        )
        if not parkable:
            self.flush()
            return
        # What waits for the commit (transaction.on_commit) waits with the writes.
        conn: Any = txn.conn  # django-stubs types the entries as pairs; Django keeps (ids, func, robust)
        callbacks = [(func, robust) for _, func, robust in conn.run_on_commit]
        conn.run_on_commit = []
        self._local.parked = (txn.pending, txn.fenced, callbacks, txn.rollbacks)
        txn.pending, txn.rollbacks = [], []
        self._end(txn, rollback=False)  # nothing reached the server: nothing to commit

    def send(self, sql: str, params: Sequence[Any], check: Check | None = None) -> None:
        """A write inside :meth:`write` whose result is only checked, later, before the commit."""
        txn = self._txn()
        if txn is None:
            super().send(sql, params, check)
            return
        if txn.failed is not None:
            raise txn.failed
        txn.pending.append((sql, list(params), check))

    def query(self, sql: str, params: Sequence[Any], *, commit: bool = False) -> Result:
        """A statement whose answer is needed now, sent with every write waiting before it.

        ``commit``: the transaction also commits in the same message, when the group
        began it and no sent write waits for a check (else it stays open, as without).
        """
        txn = self._txn()
        if txn is None and getattr(self._local, "parked", None):
            self._begin()  # the group's own reads see the writes parked at a barrier
            txn = self._txn()
        if txn is None:
            conn = connections[DEFAULT_DB_ALIAS]
            if _prepares():
                return self._read(conn, sql, params)
            return super().query(sql, params)
        if txn.failed is not None:
            raise txn.failed
        fused = commit and not self._whole() and _may_commit(txn, txn.pending)
        answer = self._send(txn, last=(sql, params), commit=fused)
        assert answer is not None
        if fused:
            self._end(txn, rollback=False)
        return answer

    # -- the transaction ----------------------------------------------------------

    def _new_txn(self, atomic: Any, conn: BaseDatabaseWrapper, outermost: bool) -> _Txn:
        return _PgTxn(atomic=atomic, conn=conn, outermost=outermost)

    def _opened(self, txn: _Txn) -> None:
        assert isinstance(txn, _PgTxn)
        txn.conn.ensure_connection()
        txn.prepares = _prepares()
        txn.conn.execute_wrappers.append(self._before_query)
        parked = getattr(self._local, "parked", None)
        if parked:
            self._local.parked = None
            txn.pending, txn.fenced, callbacks, txn.rollbacks = parked
            for func, robust in callbacks:
                transaction.on_commit(func, robust=robust)

    def _flushable(self) -> _Txn | None:
        txn = self._txn()
        if txn is None and getattr(self._local, "parked", None):
            self._begin()  # the writes parked at a barrier
            txn = self._txn()
        return txn

    def _send_all(self, txn: _Txn) -> None:
        assert isinstance(txn, _PgTxn)
        self._send(txn, commit=True)

    def _drop_parked(self) -> None:
        parked, self._local.parked = getattr(self._local, "parked", None), None
        if parked:
            run_all(parked[3])  # parked writes dropped: as if rolled back

    def _end(self, txn: _Txn, *, rollback: bool) -> None:
        assert isinstance(txn, _PgTxn)
        if self._before_query in txn.conn.execute_wrappers:
            txn.conn.execute_wrappers.remove(self._before_query)
        super()._end(txn, rollback=rollback)

    def _before_query(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        """Any other query on the connection first sends the writes waiting before it."""
        txn = self._txn()
        if txn is not None and txn.pending and not txn.sending:
            self._send(txn)
        return execute(sql, params, many, context)

    def _send(
        self, txn: _PgTxn, *, last: tuple[str, Sequence[Any]] | None = None, commit: bool = False
    ) -> Result | None:
        """One round trip: the waiting writes, then ``last`` or the commit; then the checks."""
        pending, txn.pending = txn.pending, []
        statements: list[tuple[str, Sequence[Any] | None]] = [(sql, params) for sql, params, _ in pending]
        if last is not None:
            statements.append(last)
        if not statements:
            return None
        pg = txn.conn.connection  # the psycopg connection
        begin = txn.outermost and pg.info.transaction_status == _IDLE
        if begin:
            # BEGIN in the same message: psycopg would send it alone first. In autocommit
            # psycopg leaves transaction control to the statements; Django turns it back
            # on when the atomic block ends.
            pg.autocommit = True
            statements.insert(0, ("BEGIN", None))
        if commit and _may_commit(txn, pending):
            statements.append(("COMMIT", None))
        txn.sending = True
        try:
            results = self._pipeline(txn.conn, statements, prepare=txn.prepares)
        except BaseException as exc:
            refused = _refusal(exc)
            txn.failed = refused or exc
            if refused is not None:
                raise refused from exc
            raise
        finally:
            txn.sending = False
        answers = results[int(begin) :]
        try:
            for (*_, check), result in zip(pending, answers, strict=False):
                if check is not None:
                    check(result)
        except BaseException as exc:
            txn.failed = exc
            raise
        return answers[len(pending)] if last is not None else None

    def _read(self, conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> Result:
        """A query outside the group's transactions, prepared as its writes are: alone in
        autocommit, or in the caller's own transaction."""
        conn.ensure_connection()
        return self._pipeline(conn, [(sql, params)], prepare=True)[0]

    def _pipeline(
        self, conn: BaseDatabaseWrapper, statements: list[tuple[str, Sequence[Any] | None]], *, prepare: bool
    ) -> list[Result]:
        """Run ``statements`` in one psycopg pipeline (one sync, one round trip), each
        prepared if ``prepare``, past Django's cursor wrapper.

        That wrapper's per-call work (async-safety checks, connection lookups) was a
        measurable share of a step's Python (``docs/performance.md``); its database-error
        translation and any execute wrappers but this group's own (the benchmarks and
        tests count round trips with one) still apply, once per message, which they see
        as its statements joined by ``; ``.
        """
        pg = conn.connection
        # psycopg comes with the ``postgres`` extra: imported here, where a PostgreSQL
        # connection exists, so that the services (which ask ``isinstance`` of this class)
        # import on SQLite with ``make run``'s dependencies alone.
        from psycopg import Cursor

        def run(sql: str, params: Any, many: bool, context: Any) -> list[Result]:
            cursors = []
            with pg.pipeline():
                for statement, values in statements:
                    cursor = Cursor(pg)  # binding on the server, so it can be prepared
                    cursor.execute(statement, values, prepare=prepare and values is not None)
                    cursors.append(cursor)
            results = []
            for cursor in cursors:
                result = cursor.pgresult
                # The result's status, not ``description``: that builds column objects.
                rows = cursor.fetchall() if result is not None and result.status == _TUPLES_OK else []
                results.append(Result(cursor.rowcount, rows))
            return results

        executor: Callable[..., list[Result]] = run
        for wrapper in reversed(conn.execute_wrappers):
            if wrapper != self._before_query:
                executor = functools.partial(wrapper, executor)
        text = "; ".join(statement for statement, _ in statements)
        with conn.wrap_database_errors:
            return executor(text, None, False, {"connection": conn, "cursor": None})


def _may_commit(txn: _PgTxn, pending: Sequence[tuple[Any, ...]]) -> bool:
    """A message may end with ``COMMIT``: the group began the transaction, no sent write
    waits for its check, and Django sees nothing to roll back (no savepoint open inside,
    no inner atomic block that failed): the message bypasses Django's cursor, so it must
    not commit what Django would have rolled back."""
    conn = txn.conn
    return (
        txn.outermost
        and not conn.needs_rollback
        and not conn.savepoint_ids
        and all(check is None for *_, check in pending)
    )


_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE
_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK
_REFUSALS: dict[str, type[StoreError]] = {
    LeaseLostError.code: LeaseLostError,
    StaleCheckpointError.code: StaleCheckpointError,
}
"""The refusals the server raises (``keelgate_refuse``), by code."""


def _refusal(exc: BaseException) -> StoreError | None:
    """The engine's error for a ``keelgate_refuse`` raised by the server, else None."""
    diag = getattr(exc.__cause__ or exc, "diag", None)
    message = getattr(diag, "message_primary", None) or ""
    if not message.startswith("keelgate:"):
        return None
    error = _REFUSALS.get(message.removeprefix("keelgate:"))
    return None if error is None else error(getattr(diag, "message_detail", None) or "")


def _prepares() -> bool:
    return bool(getattr(settings, "KEELGATE_DB_PREPARE", True))
