"""The engine's commit grouping (``keelgate.commits``) on the Django database.

A loop over the ORM stores holds one :class:`DjangoCommitGroup`: between two barriers
its checkpoint saves, key claims and audit events run in one transaction, and the
worker's fence (its lease epoch, ``runs.engine.fencing``) is checked once per transaction,
under a row lock that lasts until the commit, instead of once per write. Opened at
the first write, never before: on SQLite an open transaction holds the file's write
lock, and a barrier (a planner or tool call) must never wait with it held.

On PostgreSQL the group also saves round trips, which are most of a step's cost there.
A write whose answer nobody needs yet (the fence, a checkpoint insert, an audit row) is
*sent* (:meth:`DjangoCommitGroup.send`): it waits, bound on the client, and goes to the
server in one message with the next statement that needs an answer
(:meth:`DjangoCommitGroup.query`, any ORM query, or the commit). A sent write either
refuses itself on the server (``keelgate_refuse``: the fence's epoch, a worker's
checkpoint save) or carries a check of its result (the projection's answer elsewhere),
run as soon as the answers are back and always before the commit; a refusal or a
failed check rolls the whole transaction back, and what a store remembered of its
writes goes with it (:meth:`DjangoCommitGroup.on_rollback`). ``BEGIN`` travels with the
first message and ``COMMIT`` with the last one when no check is outstanding, so a
transaction of any size costs one or two round trips. SQLite (in-process, no round
trips) runs every statement at once.

Each statement the group sends is prepared once per connection (``PREPARE``, in the
message that first uses it; :class:`_Prepared`) and then sent as ``EXECUTE name(...)``:
the server parses and plans the checkpoint, key and audit statements once instead of at
every save, which was half of their server time. ``KEELGATE_DB_PREPARE=0`` turns this
off for a pooler that shares one server session between clients (PgBouncer in
transaction mode): there a session's prepared statements are not its own.

At a barrier (``keelgate.commits``: outside code runs next) writes that were only bound
on the client hold no lock, so :meth:`DjangoCommitGroup.barrier` parks them outside any
transaction and sends them with the next flush: the checkpoints a step saves before
its next plan commit with the plan, one fsync fewer per step. A crash meanwhile loses
them, as it loses any unflushed write; they had no effect outside and are redone.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from keelgate.errors import LeaseLostError, StaleCheckpointError, StoreError
from runs.engine.fencing import Fence, check_fence, fence_refusing


@dataclass(frozen=True)
class Result:
    """What one statement answered: its row count and rows (empty without a result set)."""

    rowcount: int
    rows: list[tuple[Any, ...]]


Check = Callable[[Result], None]
"""Looks at a sent statement's result and raises if the write must not stand."""


@dataclass
class _Txn:
    """The group's open transaction on one thread."""

    atomic: Any
    conn: BaseDatabaseWrapper
    outermost: bool
    fenced: bool = False
    pending: list[tuple[str, Check | None]] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict)
    failed: BaseException | None = None
    sending: bool = False
    binder: Any = None
    """A psycopg client cursor, for binding parameters without a round trip."""
    prepares: bool = False
    """Statements go as ``EXECUTE`` of prepared ones (``KEELGATE_DB_PREPARE``)."""
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

    def __init__(self, fence: Fence | None = None) -> None:
        self.fence = fence
        self._local = threading.local()

    @functools.cached_property
    def vendor(self) -> str:
        """The database's (``postgresql``, ``sqlite``), read once: each read of Django's
        ``connection`` proxy looks the connection up in an asgiref local, several
        microseconds that a step paid a dozen times."""
        return connections[DEFAULT_DB_ALIAS].vendor

    def _holds(self) -> int:
        return getattr(self._local, "holds", 0)

    def _txn(self) -> _Txn | None:
        return getattr(self._local, "txn", None)

    def hold(self) -> None:
        self._local.holds = self._holds() + 1

    def _whole(self) -> bool:
        return bool(getattr(self._local, "whole", False))

    def flush(self) -> None:
        if self._whole():
            return  # the block of :meth:`transaction` commits once, at its end
        txn = self._txn()
        if txn is None:
            if not getattr(self._local, "parked", None):
                return
            self._begin()  # the writes parked at a barrier
            txn = self._txn()
            assert txn is not None
        if txn.failed is not None:
            self._end(txn, rollback=True)
            return
        try:
            self._send(txn, commit=True)
        except BaseException:
            self._end(txn, rollback=True)
            raise
        self._end(txn, rollback=False)

    def barrier(self) -> None:
        """Outside code runs next: park what holds nothing yet, else flush.

        Writes bound on the client but never sent (PostgreSQL, no ``BEGIN`` yet) hold no
        lock: they leave Django's transaction (so outside code on this connection runs
        as if they did not exist) and go with the next flush, saving its commit. Once
        anything was sent, the barrier flushes.
        """
        txn = self._txn()
        if txn is None or self._whole():
            return
        parkable = (
            txn.conn.vendor == "postgresql"
            and txn.outermost
            and txn.failed is None
            and txn.conn.connection.info.transaction_status == _IDLE
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

    def release(self) -> None:
        try:
            self.flush()
        finally:
            self._local.holds = self._holds() - 1

    def discard(self) -> None:
        txn = self._txn()
        parked, self._local.parked = getattr(self._local, "parked", None), None
        if parked:
            _run_all(parked[3])  # parked writes dropped: as if rolled back
        try:
            if txn is not None:
                self._end(txn, rollback=True)
        finally:
            self._local.holds = self._holds() - 1

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
        """A write inside :meth:`write` whose result is only checked, later, before the commit."""
        txn = self._txn()
        if txn is None or txn.conn.vendor != "postgresql":
            result = _execute(connections[DEFAULT_DB_ALIAS], sql, params)
            if check is not None:
                check(result)
            return
        if txn.failed is not None:
            raise txn.failed
        txn.pending.append((_bound(txn.binder, txn.prepares, sql, params), check))

    def query(self, sql: str, params: Sequence[Any], *, commit: bool = False) -> Result:
        """A statement whose answer is needed now, sent with every write waiting before it.

        ``commit``: on PostgreSQL the transaction also commits in the same message, when
        the group began it and no sent write waits for a check (else it stays open, as
        without). For a caller that would flush right after the answer anyway.
        """
        txn = self._txn()
        if txn is None and getattr(self._local, "parked", None):
            self._begin()  # the group's own reads see the writes parked at a barrier
            txn = self._txn()
        if txn is None or txn.conn.vendor != "postgresql":
            conn = connections[DEFAULT_DB_ALIAS]
            if txn is None and conn.vendor == "postgresql" and _prepares():
                return self._read(conn, sql, params)
            return _execute(conn, sql, params)
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
            txn = self._local.txn = _Txn(atomic=atomic, conn=conn, outermost=outermost)
            if conn.vendor == "postgresql":
                conn.ensure_connection()
                txn.binder = conn.connection.cursor()
                txn.prepares = _prepares()
                conn.execute_wrappers.append(self._before_query)
            parked = getattr(self._local, "parked", None)
            if parked:
                self._local.parked = None
                txn.pending, txn.fenced, callbacks, txn.rollbacks = parked
                for func, robust in callbacks:
                    transaction.on_commit(func, robust=robust)
        if txn.fenced or self.fence is None:
            return
        if txn.conn.vendor == "postgresql":  # checked by the server: the commit may go with it
            self.send(*fence_refusing(self.fence))
        else:
            check_fence(self.fence)
        txn.fenced = True  # its row lock lasts until the commit

    def _end(self, txn: _Txn, *, rollback: bool) -> None:
        self._local.txn = None
        if txn.binder is not None:
            txn.binder.close()
        if self._before_query in txn.conn.execute_wrappers:
            txn.conn.execute_wrappers.remove(self._before_query)
        if rollback:
            transaction.set_rollback(True)
            _run_all(txn.rollbacks)
        try:
            txn.atomic.__exit__(None, None, None)
        except BaseException:  # the commit itself failed: nothing of it stands
            if not rollback:
                _run_all(txn.rollbacks)
            raise

    def _before_query(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        """Any other query on the connection first sends the writes waiting before it."""
        txn = self._txn()
        if txn is not None and txn.pending and not txn.sending:
            self._send(txn)
        return execute(sql, params, many, context)

    def _send(self, txn: _Txn, *, last: str | None = None, commit: bool = False) -> Result | None:
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


def _run_all(undos: list[Callable[[], None]]) -> None:
    for undo in undos:
        undo()


def _refusal(exc: BaseException) -> StoreError | None:
    """The engine's error for a ``keelgate_refuse`` raised by the server, else None."""
    diag = getattr(exc.__cause__ or exc, "diag", None)
    message = getattr(diag, "message_primary", None) or ""
    if not message.startswith("keelgate:"):
        return None
    error = _REFUSALS.get(message.removeprefix("keelgate:"))
    return None if error is None else error(getattr(diag, "message_detail", None) or "")


def _execute(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> Result:
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall() if cursor.description else []
        return Result(cursor.rowcount, rows)


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
