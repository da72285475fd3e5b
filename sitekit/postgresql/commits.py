"""The commit group on PostgreSQL: a transaction's writes in one or two round trips.

Round trips are most of a step's cost on PostgreSQL. A write whose answer nobody needs
yet (the fence, a checkpoint insert, an audit row) is *sent*
(:meth:`PostgresCommitGroup.send`): it waits, bound on the client, and goes to the server
in one message with the next statement that needs an answer
(:meth:`PostgresCommitGroup.query`, any ORM query, or the commit). A sent write either
refuses itself on the server (``keelgate_refuse``, migration ``runs.0004``: a worker's
fence, its checkpoint save) or carries a check of its result, run as soon as the
answers are back and always before the commit; a refusal or a failed check rolls the
whole transaction back, and what a store remembered of its writes goes with it
(:meth:`~sitekit.commits.DjangoCommitGroup.on_rollback`). ``BEGIN`` travels with the
first message and ``COMMIT`` with the last one when no check is outstanding, so a
transaction of any size costs one or two round trips.

Each statement the group sends is prepared once per connection (``PREPARE``, in the
message that first uses it; :class:`_Prepared`) and then sent as ``EXECUTE name(...)``:
the server parses and plans the checkpoint, key and audit statements once instead of at
every save. ``KEELGATE_DB_PREPARE=0`` turns this off for a pooler that shares one server
session between clients (PgBouncer in transaction mode): there a session's prepared
statements are not its own.

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
import hashlib
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from keelgate.errors import LeaseLostError, StaleCheckpointError, StoreError
from sitekit.commits import Check, DjangoCommitGroup, Result, RowWriter, _Txn, run_all
from sitekit.postgresql.rows import PostgresRowWriter

__all__ = ["PostgresCommitGroup", "expand_prepared"]


@dataclass
class _PgTxn(_Txn):
    """The open transaction, with what waits to be sent."""

    pending: list[tuple[str, Check | None]] = field(default_factory=list)
    sending: bool = False
    binder: Any = None
    """A psycopg client cursor, for binding parameters without a round trip."""
    prepares: bool = False
    """Statements go as ``EXECUTE`` of prepared ones (``KEELGATE_DB_PREPARE``)."""


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

        Writes bound on the client but never sent (no ``BEGIN`` yet) hold no lock: they
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
        txn.pending.append((_bound(txn.binder, txn.prepares, sql, params), check))

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
        fused = (
            commit and txn.outermost and not self._whole() and all(check is None for _, check in txn.pending)
        )
        answer = self._send(txn, last=_bound(txn.binder, txn.prepares, sql, params), commit=fused)
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
        txn.binder = txn.conn.connection.cursor()
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
        if txn.binder is not None:
            txn.binder.close()
        if self._before_query in txn.conn.execute_wrappers:
            txn.conn.execute_wrappers.remove(self._before_query)
        super()._end(txn, rollback=rollback)

    def _before_query(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        """Any other query on the connection first sends the writes waiting before it."""
        txn = self._txn()
        if txn is not None and txn.pending and not txn.sending:
            self._send(txn)
        return execute(sql, params, many, context)

    def _send(self, txn: _PgTxn, *, last: str | None = None, commit: bool = False) -> Result | None:
        """One round trip: the waiting writes, then ``last`` or the commit; then the checks."""
        pending, txn.pending = txn.pending, []
        parts = [sql for sql, _ in pending]
        if last is not None:
            parts.append(last)
        if not parts:
            return None
        pg = txn.conn.connection  # the psycopg connection
        begin = txn.outermost and pg.info.transaction_status == _IDLE
        if begin:
            # BEGIN in the same message: psycopg would send it alone first. In autocommit
            # psycopg leaves transaction control to the statements; Django turns it back
            # on when the atomic block ends.
            pg.autocommit = True
            parts.insert(0, "BEGIN")
        fused_commit = commit and txn.outermost and all(check is None for _, check in pending)
        if fused_commit:
            parts.append("COMMIT")
        prepared = _Prepared.on(pg)
        preamble = prepared.preamble(parts)
        txn.sending = True
        try:
            results = self._execute_raw(txn.conn, txn.binder, "; ".join([*preamble, *parts]))
        except BaseException as exc:
            refused = _refusal(exc)
            if preamble and refused is None:  # a refusal comes from past the preamble: it all ran
                prepared.lost()
            txn.failed = refused or exc
            if refused is not None:
                raise refused from exc
            raise
        finally:
            txn.sending = False
        answers = results[len(preamble) + int(begin) :]
        try:
            for (_, check), result in zip(pending, answers, strict=False):
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
        pg = conn.connection
        cursor = pg.cursor()
        try:
            text = _bound(cursor, True, sql, params)
            prepared = _Prepared.on(pg)
            preamble = prepared.preamble([text])
            try:
                results = self._execute_raw(conn, cursor, "; ".join([*preamble, text]))
            except BaseException as exc:
                if preamble and _refusal(exc) is None:
                    prepared.lost()
                raise
        finally:
            cursor.close()
        return results[-1]

    def _execute_raw(self, conn: BaseDatabaseWrapper, cursor: Any, text: str) -> list[Result]:
        """Run ``text`` (bound already) on the psycopg cursor, past Django's cursor wrapper.

        That wrapper's per-call work (async-safety checks, connection lookups) was a
        tenth of a step's Python; its database-error translation and any execute
        wrappers but this group's own (the benchmarks count queries with one) still apply.
        """

        def run(sql: str, params: Any, many: bool, context: Any) -> list[Result]:
            cursor.execute(sql)
            results = []
            while True:
                # The result's status, not ``description``: that builds column objects.
                rows = cursor.fetchall() if cursor.pgresult.status == _TUPLES_OK else []
                results.append(Result(cursor.rowcount, rows))
                if not cursor.nextset():
                    return results

        executor: Callable[..., list[Result]] = run
        for wrapper in reversed(conn.execute_wrappers):
            if wrapper != self._before_query:
                executor = functools.partial(wrapper, executor)
        with conn.wrap_database_errors:
            return executor(text, None, False, {"connection": conn, "cursor": cursor})


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


class _Prepared:
    """The group's statements prepared on one server session, by name.

    A message gets, at its head, the ``PREPARE`` of each statement it executes that the
    connection it goes on has not prepared yet: known when the message is sent, not
    when its writes were bound, as writes parked at a barrier may leave on another
    connection. A ``PREPARE`` is not transactional: it stands whether its transaction
    commits or not. A message that fails otherwise than by a refusal
    (``keelgate_refuse``, which only statements past the preamble raise) may have failed
    in a ``PREPARE``, leaving those after it undone: the registry is then unsure, and
    the next message starts with ``DEALLOCATE ALL`` and prepares again what it uses.
    """

    _of: ClassVar[weakref.WeakKeyDictionary[Any, _Prepared]] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.unsure = False

    @classmethod
    def on(cls, pg: Any) -> _Prepared:
        """The registry of the psycopg connection ``pg`` (a new connection starts empty)."""
        prepared = cls._of.get(pg)
        if prepared is None:
            prepared = cls._of[pg] = cls()
        return prepared

    def preamble(self, parts: Sequence[str]) -> list[str]:
        """What must run before ``parts`` on this session; counted as prepared from now."""
        preamble = ["DEALLOCATE ALL"] if self.unsure else []
        self.unsure = False
        for part in parts:
            match = _EXECUTE.match(part)
            name = match.group(1) if match else ""
            if name and name not in self.names:
                self.names.add(name)
                preamble.append(_PREPARES[name])
        return preamble

    def lost(self) -> None:
        self.names.clear()
        self.unsure = True


_PLACEHOLDER = re.compile(r"%%|%s")
_EXECUTE = re.compile(r"EXECUTE (keelgate_[0-9a-f]+)")
_STATEMENTS: dict[str, tuple[str, int]] = {}
"""Every statement the group prepares, by its SQL: its name and parameter count."""
_PREPARES: dict[str, str] = {}
"""The same statements by name, with their ``PREPARE``."""
_MOST_STATEMENTS = 512
"""Far more distinct statements than the group sends: past it, new ones go unprepared."""


def _statement(sql: str) -> tuple[str, int] | None:
    """``sql``'s statement name and parameter count (its ``PREPARE`` in ``_PREPARES``)."""
    known = _STATEMENTS.get(sql)
    if known is not None or len(_STATEMENTS) >= _MOST_STATEMENTS:
        return known
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group() == "%%":
            return "%"
        count += 1
        return f"${count}"

    numbered = _PLACEHOLDER.sub(number, sql)
    name = "keelgate_" + hashlib.sha256(sql.encode()).hexdigest()[:20]
    _PREPARES[name] = f"PREPARE {name} AS {numbered}"
    known = _STATEMENTS[sql] = (name, count)
    return known


def expand_prepared(message: str) -> str:
    """``message`` as the server runs it, for counting and profiling: without the
    ``PREPARE`` statements at its head, and each ``EXECUTE`` of a group statement shown
    as that statement (placeholders numbered) followed by its arguments."""
    for name in set(_EXECUTE.findall(message)):
        prepare = _PREPARES.get(name)
        if prepare is not None:
            statement = prepare.split(" AS ", 1)[1]
            message = message.replace(f"{prepare}; ", "").replace(f"EXECUTE {name}", statement)
    return message


def _prepares() -> bool:
    return bool(getattr(settings, "KEELGATE_DB_PREPARE", True))


def _bound(binder: Any, prepares: bool, sql: str, params: Sequence[Any]) -> str:
    """The statement as it goes into a message: ``EXECUTE`` with literal arguments, else bound text."""
    statement = _statement(sql) if prepares else None
    if statement is None:
        return str(binder.mogrify(sql, params))
    name, count = statement
    if count != len(params):
        raise ValueError(f"{count} placeholders, {len(params)} parameters")
    arguments = f"({', '.join(['%s'] * count)})" if count else ""
    return str(binder.mogrify(f"EXECUTE {name}{arguments}", params))
