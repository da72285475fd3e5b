"""How every engine store opens its SQLite file, and how stores share one.

Stores on separate files commit every write on its own. Stores built on one
:class:`SqliteDatabase` can also group a loop's writes into fewer commits (see
:mod:`keelgate.commits`): the fsync is most of a durable write's cost, and a step's
checkpoint, audit event and key claim need not each pay for one.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["BUSY_TIMEOUT_MS", "SqliteDatabase", "enable_wal", "open_durable", "open_store"]

BUSY_TIMEOUT_MS = 30_000
"""Competing writers (threads or processes) wait this long instead of failing."""


def enable_wal(conn: sqlite3.Connection, *, seconds: float = BUSY_TIMEOUT_MS / 1000) -> None:
    """Switch the file to WAL, waiting for processes that open it at the same moment.

    SQLite answers a journal-mode change that races another connection's with "database
    is locked" at once, without calling the busy handler; retry it for a bounded time.
    """
    deadline = time.monotonic() + seconds
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def open_durable(path: str | Path) -> sqlite3.Connection:
    """A connection in WAL mode with ``synchronous=FULL``: a commit survives power loss.

    ``isolation_level=None`` leaves transactions to the caller, so ``BEGIN IMMEDIATE``
    means what it says; ``check_same_thread=False`` because each store guards its one
    connection with a lock instead.
    """
    conn = sqlite3.connect(
        str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    try:
        # The busy timeout first, so the pragmas below wait for a process opening the file.
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if str(path) != ":memory:" and not str(path).startswith("file::memory:"):
            enable_wal(conn)
        conn.execute("PRAGMA synchronous = FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def _me() -> tuple[int, int]:
    """Who is writing: the thread, and the asyncio task within it (0 outside one)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return threading.get_ident(), id(task) if task is not None else 0


class SqliteDatabase:
    """One durable connection shared by stores and threads, with commit grouping.

    Outside a held group every :meth:`write` is its own ``BEGIN IMMEDIATE`` ..
    ``COMMIT``. Between :meth:`hold` and :meth:`release` the holder's writes join one
    open transaction that :meth:`flush` commits. A store raises its own errors (stale,
    not owned) before it writes anything, so those leave the group as it was; a
    database error, which can leave a write half done, rolls the whole group back, as a
    crash would (no savepoint per write: they cost a sixth of a step's SQL time).
    While it is open the connection's lock stays with the holder: another thread waits
    for the flush, and another asyncio task on the holder's thread is refused, because
    it could only deadlock or join a transaction that is not its own (a held
    transaction must never span an ``await`` that yields).
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = os.fspath(path)
        self.conn = open_durable(self.path)
        self._lock = threading.Lock()
        self._holds: dict[tuple[int, int], int] = {}
        self._open_by: tuple[int, int] | None = None
        self._closed = False

    # -- commit grouping (keelgate.commits.CommitGroup) ------------------------------

    def hold(self) -> None:
        """From now on the caller's writes join one transaction until :meth:`flush`."""
        me = _me()
        self._holds[me] = self._holds.get(me, 0) + 1

    def flush(self) -> None:
        """Commit the caller's open transaction, if any: everything in it is now durable."""
        if self._open_by != _me():
            return
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        finally:
            self._open_by = None
            self._lock.release()

    def barrier(self) -> None:
        """Commit: the open transaction holds the file's write lock from its first write."""
        self.flush()

    def release(self) -> None:
        """Flush, and stop holding (each :meth:`hold` needs one release)."""
        try:
            self.flush()
        finally:
            self._unhold()

    def discard(self) -> None:
        """Roll back the caller's unflushed writes and stop holding: what a crash does to them."""
        try:
            if self._open_by == _me():
                try:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                finally:
                    self._open_by = None
                    self._lock.release()
        finally:
            self._unhold()

    def _unhold(self) -> None:
        me = _me()
        left = self._holds.get(me, 0) - 1
        if left > 0:
            self._holds[me] = left
        else:
            self._holds.pop(me, None)

    # -- what stores use ---------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads; inside the caller's open transaction it sees its writes."""
        if self._open_by == _me():
            yield self.conn
            return
        self._acquire()
        try:
            yield self.conn
        finally:
            self._lock.release()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: committed now, or part of the caller's held transaction."""
        me = _me()
        if me in self._holds:
            if self._open_by != me:
                self._acquire()
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                except BaseException:
                    self._lock.release()
                    raise
                self._open_by = me
            try:
                yield self.conn
            except sqlite3.Error:
                # A database error may leave a write half done: drop the whole group,
                # as a crash would. The stores raise their own errors before writing.
                try:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                finally:
                    self._open_by = None
                    self._lock.release()
                raise
            return
        self._acquire()
        try:
            # IMMEDIATE takes the file's write lock now, not at the first write, so a
            # read inside the transaction cannot go stale before its write.
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
                self.conn.execute("COMMIT")
            except BaseException:
                # SQLite may already have rolled back (an I/O error does that).
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        finally:
            self._lock.release()

    def _acquire(self) -> None:
        holder = self._open_by
        if holder is not None and holder[0] == threading.get_ident():
            raise RuntimeError(
                "another asyncio task holds this database's open transaction: "
                "a held commit group must be flushed before any await that yields"
            )
        self._lock.acquire()

    def close(self) -> None:
        """Close the connection (idempotent); every store on it is unusable afterwards."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
            self.conn.close()

    def __repr__(self) -> str:
        return f"SqliteDatabase({self.path!r})"


def open_store(path: str | Path | SqliteDatabase, schema: Sequence[str]) -> SqliteDatabase:
    """The database a store writes through (one it shares, or its own file), with its tables."""
    db = path if isinstance(path, SqliteDatabase) else SqliteDatabase(path)
    try:
        with db.write() as conn:
            for statement in schema:
                conn.execute(statement)
    except BaseException:
        if db is not path:
            db.close()
        raise
    return db
