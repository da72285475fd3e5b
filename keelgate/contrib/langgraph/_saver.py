"""A LangGraph checkpointer on Keelgate's databases: tenant-scoped, fenced, ordered.

``KeelgateSaver`` is a ``BaseCheckpointSaver`` bound to one tenant: the tenant is a
column of every key it reads or writes, so a thread of another tenant is simply absent
(never an error that says it exists). Writes can be *owned*: a saver made with an owner
(:meth:`KeelgateSaver.owned`, or the site's saver under a worker's lease) checks, in the
transaction of every ``put``, ``put_writes``, copy, prune and delete of a thread, that
the owner is still the thread's current one, and refuses a superseded owner with
:class:`~keelgate.errors.StaleOwnerError` before it writes anything (langgraph#8796).

Order (langgraph#8039): each ``put`` and ``put_writes`` is one transaction, committed
durably before the call returns, and an :class:`AsyncKeelgateSaver` runs its calls on
one thread in the order LangGraph made them. So a task's pending writes are on disk
before the checkpoint that follows them, whatever the host, and a process killed
between the two resumes with the task's writes: the task is not run again.

The SQL is one text for every database: SQLite through the stdlib here, SQLite or
PostgreSQL through Django in the site (``runs.engine.graph_saver``), behind the small
:class:`SaverDatabase` protocol.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from keelgate._sqlite import SqliteDatabase
from keelgate.errors import CheckpointUnreadableError, ConfigurationError, StaleOwnerError

__all__ = [
    "AsyncKeelgateSaver",
    "KeelgateSaver",
    "SaverDatabase",
    "Sql",
    "ThreadLease",
]

T = TypeVar("T")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS kg_graph_checkpoints (
        tenant_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        parent_checkpoint_id TEXT,
        run_id TEXT,
        type TEXT NOT NULL,
        checkpoint BLOB NOT NULL,
        metadata_type TEXT NOT NULL,
        metadata BLOB NOT NULL,
        PRIMARY KEY (tenant_id, thread_id, checkpoint_ns, checkpoint_id)
    )""",
    """CREATE TABLE IF NOT EXISTS kg_graph_writes (
        tenant_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        channel TEXT NOT NULL,
        type TEXT NOT NULL,
        value BLOB NOT NULL,
        task_path TEXT NOT NULL,
        PRIMARY KEY (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    )""",
    "CREATE INDEX IF NOT EXISTS kg_graph_checkpoints_run ON kg_graph_checkpoints (tenant_id, run_id)",
    """CREATE TABLE IF NOT EXISTS kg_graph_leases (
        tenant_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        expires_at TEXT NOT NULL,
        PRIMARY KEY (tenant_id, thread_id)
    )""",
)
"""The stdlib SQLite tables; the site's migration creates the same two graph tables."""

_CP_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata_type, metadata"
)


class Sql(Protocol):
    """One open transaction (or read) on a database: parameters are written ``?``."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a query and return its rows."""
        ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement and return the number of rows it changed."""
        ...


class SaverDatabase(Protocol):
    """Where a :class:`KeelgateSaver` keeps its tables.

    Contract: ``write()`` is one atomic transaction, durably committed when the block
    exits without error and rolled back otherwise; ``check_owner`` runs inside it, before
    the saver writes, and raises :class:`~keelgate.errors.StaleOwnerError` when ``owner``
    (``None``: an unowned saver) may not write to that thread now.
    """

    def write(self) -> AbstractContextManager[Sql]:
        """One atomic, durable transaction."""
        ...

    def read(self) -> AbstractContextManager[Sql]:
        """A consistent read."""
        ...

    def check_owner(self, sql: Sql, tenant_id: str, thread_id: str, owner: object | None) -> None:
        """Refuse a write to ``thread_id`` by an owner that is not its current one."""
        ...


@dataclass(frozen=True)
class ThreadLease:
    """The right to write one thread, until another owner takes it (a higher epoch)."""

    tenant_id: str
    thread_id: str
    owner: str
    epoch: int
    expires_at: datetime


class _SqliteSql:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self._conn.execute(sql, tuple(params)).rowcount)


class _StdlibDatabase:
    """The saver's tables in a stdlib SQLite file (a :class:`~keelgate.sqlite.SqliteDatabase`).

    Leases live in a table of their own: a thread with a lease row may be written only
    by that lease's epoch; a thread without one by anybody (the unowned saver).
    """

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        with db.write() as conn:
            for statement in SCHEMA:
                conn.execute(statement)

    @contextmanager
    def write(self) -> Iterator[Sql]:
        with self.db.write() as conn:
            yield _SqliteSql(conn)

    @contextmanager
    def read(self) -> Iterator[Sql]:
        with self.db.read() as conn:
            yield _SqliteSql(conn)

    def check_owner(self, sql: Sql, tenant_id: str, thread_id: str, owner: object | None) -> None:
        found = sql.rows(
            "SELECT epoch, owner FROM kg_graph_leases WHERE tenant_id = ? AND thread_id = ?",
            (tenant_id, thread_id),
        )
        current = found[0][0] if found else None
        if owner is None:
            if current is not None:
                raise StaleOwnerError(f"{thread_id} is owned (epoch {current}); this saver owns nothing")
            return
        if not isinstance(owner, ThreadLease) or owner.thread_id != thread_id or owner.epoch != current:
            epoch = getattr(owner, "epoch", None)
            raise StaleOwnerError(f"{thread_id} epoch {epoch} is not the current {current}")

    def acquire(
        self, tenant_id: str, thread_id: str, owner: str, lease_seconds: float, now: datetime
    ) -> ThreadLease | None:
        expires = now + timedelta(seconds=lease_seconds)
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT owner, epoch, expires_at FROM kg_graph_leases WHERE tenant_id = ? AND thread_id = ?",
                (tenant_id, thread_id),
            ).fetchone()
            if row is None:
                epoch = 1
                conn.execute(
                    "INSERT INTO kg_graph_leases (tenant_id, thread_id, owner, epoch, expires_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (tenant_id, thread_id, owner, epoch, expires.isoformat()),
                )
            else:
                if row[0] != owner and datetime.fromisoformat(row[2]) > now:
                    return None  # held by a live owner
                epoch = int(row[1]) + 1
                conn.execute(
                    "UPDATE kg_graph_leases SET owner = ?, epoch = ?, expires_at = ?"
                    " WHERE tenant_id = ? AND thread_id = ?",
                    (owner, epoch, expires.isoformat(), tenant_id, thread_id),
                )
        return ThreadLease(tenant_id, thread_id, owner, epoch, expires)

    def renew(self, lease: ThreadLease, lease_seconds: float, now: datetime) -> ThreadLease | None:
        expires = now + timedelta(seconds=lease_seconds)
        with self.db.write() as conn:
            changed = conn.execute(
                "UPDATE kg_graph_leases SET expires_at = ?"
                " WHERE tenant_id = ? AND thread_id = ? AND epoch = ?",
                (expires.isoformat(), lease.tenant_id, lease.thread_id, lease.epoch),
            ).rowcount
        if changed != 1:
            return None
        return ThreadLease(lease.tenant_id, lease.thread_id, lease.owner, lease.epoch, expires)

    def release(self, lease: ThreadLease) -> bool:
        with self.db.write() as conn:
            changed = conn.execute(
                "DELETE FROM kg_graph_leases WHERE tenant_id = ? AND thread_id = ? AND epoch = ?",
                (lease.tenant_id, lease.thread_id, lease.epoch),
            ).rowcount
        return bool(changed == 1)


def _blob(value: Any) -> bytes:
    """PostgreSQL hands a bytea back as a memoryview."""
    return bytes(value) if not isinstance(value, bytes) else value


class KeelgateSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a Keelgate database, scoped to one tenant.

    ::

        saver = KeelgateSaver.sqlite("graphs.sqlite3", tenant_id="acme")
        graph = builder.compile(checkpointer=saver)

    Supports the base capabilities and ``delete_for_runs``, ``copy_thread`` and
    ``prune`` (LangGraph's conformance suite runs them all). The async methods run the
    sync ones inline, as LangGraph's in-memory saver does; :class:`AsyncKeelgateSaver`
    runs them off the event loop.
    """

    def __init__(
        self,
        database: SaverDatabase,
        *,
        tenant_id: str,
        owner: object | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if not tenant_id:
            raise ConfigurationError("a saver needs a tenant")
        self.database = database
        self.tenant_id = tenant_id
        self.owner = owner
        """What this saver writes as (a :class:`ThreadLease`, the site's fence), or None."""
        self.failpoint: Callable[[str, Sequence[tuple[str, Any]]], None] | None = None
        """Tests: called once committed, with ``"after_put"`` and the checkpoint's channel
        values, or ``"after_put_writes"`` and the writes."""

    @classmethod
    def sqlite(cls, path: str | Path | SqliteDatabase, *, tenant_id: str = "default") -> KeelgateSaver:
        """A saver on a SQLite file (stdlib; WAL, ``synchronous=FULL``), one line."""
        db = path if isinstance(path, SqliteDatabase) else SqliteDatabase(path)
        return cls(_StdlibDatabase(db), tenant_id=tenant_id)

    def for_tenant(self, tenant_id: str) -> KeelgateSaver:
        """The same database seen as another tenant (unowned): its threads, nobody else's."""
        return type(self)(self.database, tenant_id=tenant_id, serde=self.serde)

    # -- ownership ------------------------------------------------------------------

    def acquire(
        self, thread_id: str, *, owner: str, lease_seconds: float = 30.0, now: datetime | None = None
    ) -> ThreadLease | None:
        """Take the thread's lease (new, expired or already ours), bumping its epoch; None if held."""
        return self._leases().acquire(
            self.tenant_id, thread_id, owner, lease_seconds, now or datetime.now(UTC)
        )

    def renew(self, lease: ThreadLease, *, lease_seconds: float = 30.0) -> ThreadLease | None:
        """Extend a lease still current; None once another owner took the thread."""
        return self._leases().renew(lease, lease_seconds, datetime.now(UTC))

    def release(self, lease: ThreadLease) -> bool:
        """Give the thread back (only if ``lease`` is still current)."""
        return self._leases().release(lease)

    def owned(self, owner: object) -> KeelgateSaver:
        """This saver writing as ``owner``: every write checks it is still current."""
        saver = type(self)(self.database, tenant_id=self.tenant_id, owner=owner, serde=self.serde)
        saver.failpoint = self.failpoint
        return saver

    def _leases(self) -> _StdlibDatabase:
        if not isinstance(self.database, _StdlibDatabase):
            raise ConfigurationError("this database's leases are its runs' (the worker's claim)")
        return self.database

    # -- reads ------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the thread's newest; None if absent."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        with self.database.read() as sql:
            if checkpoint_id:
                found = sql.rows(
                    f"SELECT {_CP_COLUMNS} FROM kg_graph_checkpoints WHERE tenant_id = ?"
                    " AND thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                    (self.tenant_id, thread_id, ns, checkpoint_id),
                )
            else:
                found = sql.rows(
                    f"SELECT {_CP_COLUMNS} FROM kg_graph_checkpoints WHERE tenant_id = ?"
                    " AND thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1",
                    (self.tenant_id, thread_id, ns),
                )
            if not found:
                return None
            return self._tuple(sql, found[0])

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The tenant's checkpoints, newest first, by thread, namespace, metadata, cursor."""
        where, params = ["tenant_id = ?"], [self.tenant_id]
        conf = (config or {}).get("configurable", {})
        if conf.get("thread_id") is not None:
            where.append("thread_id = ?")
            params.append(str(conf["thread_id"]))
        if conf.get("checkpoint_ns") is not None:
            where.append("checkpoint_ns = ?")
            params.append(str(conf["checkpoint_ns"]))
        if conf.get("checkpoint_id"):
            where.append("checkpoint_id = ?")
            params.append(str(conf["checkpoint_id"]))
        if before is not None and get_checkpoint_id(before):
            where.append("checkpoint_id < ?")
            params.append(str(get_checkpoint_id(before)))
        query = (
            f"SELECT {_CP_COLUMNS} FROM kg_graph_checkpoints WHERE {' AND '.join(where)}"
            " ORDER BY checkpoint_id DESC"
        )
        with self.database.read() as sql:
            rows = sql.rows(query, params)
            results: list[CheckpointTuple] = []
            for row in rows:
                if limit is not None and len(results) >= limit:
                    break
                if filter:
                    metadata = self._load(row[6], row[7])
                    if any(metadata.get(k) != v for k, v in filter.items()):
                        continue
                results.append(self._tuple(sql, row))
        yield from results

    def _tuple(self, sql: Sql, row: tuple[Any, ...]) -> CheckpointTuple:
        thread_id, ns, checkpoint_id, parent_id, type_, blob, meta_type, meta = row
        writes = sql.rows(
            "SELECT task_id, channel, type, value FROM kg_graph_writes WHERE tenant_id = ?"
            " AND thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? ORDER BY task_id, idx",
            (self.tenant_id, thread_id, ns, checkpoint_id),
        )
        checkpoint, metadata = self._load(type_, blob), self._load(meta_type, meta)
        if not isinstance(checkpoint, dict) or checkpoint.get("id") != checkpoint_id:
            raise CheckpointUnreadableError("not a checkpoint")
        if not isinstance(metadata, dict):
            raise CheckpointUnreadableError("metadata is not a mapping")
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
            },
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=metadata,  # type: ignore[arg-type]
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
                if parent_id
                else None
            ),
            pending_writes=[(task, channel, self._load(t, value)) for task, channel, t, value in writes],
        )

    def _load(self, type_: str, blob: Any) -> Any:
        try:
            return self.serde.loads_typed((type_, _blob(blob)))
        except Exception as exc:  # a blob this code cannot read: say so, never guess
            raise CheckpointUnreadableError(type(exc).__name__) from exc

    # -- writes -----------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (one durable transaction, owner checked inside it)."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        parent_id = conf.get("checkpoint_id")
        meta = get_checkpoint_metadata(config, metadata)
        type_, blob = self.serde.dumps_typed(checkpoint)
        meta_type, meta_blob = self.serde.dumps_typed(meta)
        run_id = meta.get("run_id")
        with self.database.write() as sql:
            self.database.check_owner(sql, self.tenant_id, thread_id, self.owner)
            sql.run(
                "INSERT INTO kg_graph_checkpoints (tenant_id, thread_id, checkpoint_ns, checkpoint_id,"
                " parent_checkpoint_id, run_id, type, checkpoint, metadata_type, metadata)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET"
                " parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id,"
                " type = excluded.type, checkpoint = excluded.checkpoint,"
                " metadata_type = excluded.metadata_type, metadata = excluded.metadata",
                (
                    self.tenant_id,
                    thread_id,
                    ns,
                    checkpoint["id"],
                    parent_id,
                    None if run_id is None else str(run_id),
                    type_,
                    blob,
                    meta_type,
                    meta_blob,
                ),
            )
        if self.failpoint is not None:
            self.failpoint("after_put", list(checkpoint["channel_values"].items()))
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes (one durable transaction, owner checked inside it).

        A repeated ``(task_id, idx)`` keeps the first write, except the special channels
        (errors, interrupts), whose latest write replaces it, as LangGraph's savers do.
        """
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = str(conf["checkpoint_id"])
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        conflict = (
            "DO UPDATE SET channel = excluded.channel, type = excluded.type, value = excluded.value,"
            " task_path = excluded.task_path"
            if replace
            else "DO NOTHING"
        )
        rows = []
        for i, (channel, value) in enumerate(writes):
            type_, blob = self.serde.dumps_typed(value)
            rows.append(
                (
                    self.tenant_id,
                    thread_id,
                    ns,
                    checkpoint_id,
                    task_id,
                    WRITES_IDX_MAP.get(channel, i),
                    channel,
                    type_,
                    blob,
                    task_path,
                )
            )
        with self.database.write() as sql:
            self.database.check_owner(sql, self.tenant_id, thread_id, self.owner)
            for row in rows:
                sql.run(
                    "INSERT INTO kg_graph_writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id,"
                    " task_id, idx, channel, type, value, task_path) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) "
                    + conflict,
                    row,
                )
        if self.failpoint is not None:
            self.failpoint("after_put_writes", list(writes))

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes (this tenant's only)."""
        with self.database.write() as sql:
            self.database.check_owner(sql, self.tenant_id, thread_id, self.owner)
            for table in ("kg_graph_checkpoints", "kg_graph_writes"):
                sql.run(
                    f"DELETE FROM {table} WHERE tenant_id = ? AND thread_id = ?", (self.tenant_id, thread_id)
                )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the given LangGraph runs made, and their writes."""
        if not run_ids:
            return
        marks = ", ".join("?" for _ in run_ids)
        with self.database.write() as sql:
            found = sql.rows(
                "SELECT thread_id, checkpoint_ns, checkpoint_id FROM kg_graph_checkpoints"
                f" WHERE tenant_id = ? AND run_id IN ({marks})",
                (self.tenant_id, *[str(r) for r in run_ids]),
            )
            for thread_id in sorted({row[0] for row in found}):
                self.database.check_owner(sql, self.tenant_id, thread_id, self.owner)
            for thread_id, ns, checkpoint_id in found:
                self._delete_checkpoint(sql, thread_id, ns, checkpoint_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another, in one transaction."""
        with self.database.write() as sql:
            self.database.check_owner(sql, self.tenant_id, target_thread_id, self.owner)
            for table, columns in (
                (
                    "kg_graph_checkpoints",
                    "checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, checkpoint,"
                    " metadata_type, metadata",
                ),
                (
                    "kg_graph_writes",
                    "checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value, task_path",
                ),
            ):
                sql.run(
                    f"INSERT INTO {table} (tenant_id, thread_id, {columns})"
                    f" SELECT tenant_id, ?, {columns} FROM {table} WHERE tenant_id = ? AND thread_id = ?"
                    " ON CONFLICT DO NOTHING",
                    (target_thread_id, self.tenant_id, source_thread_id),
                )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: each namespace keeps its newest checkpoint (and its writes); ``delete``: all."""
        if strategy not in ("keep_latest", "delete"):
            raise ConfigurationError(f"unknown prune strategy {strategy!r}")
        with self.database.write() as sql:
            for thread_id in thread_ids:
                self.database.check_owner(sql, self.tenant_id, thread_id, self.owner)
                rows = sql.rows(
                    "SELECT checkpoint_ns, checkpoint_id FROM kg_graph_checkpoints"
                    " WHERE tenant_id = ? AND thread_id = ? ORDER BY checkpoint_ns, checkpoint_id DESC",
                    (self.tenant_id, thread_id),
                )
                newest: set[str] = set()
                for ns, checkpoint_id in rows:
                    if strategy == "keep_latest" and ns not in newest:
                        newest.add(ns)
                        continue
                    self._delete_checkpoint(sql, thread_id, ns, checkpoint_id)

    def _delete_checkpoint(self, sql: Sql, thread_id: str, ns: str, checkpoint_id: str) -> None:
        for table in ("kg_graph_checkpoints", "kg_graph_writes"):
            sql.run(
                f"DELETE FROM {table} WHERE tenant_id = ? AND thread_id = ? AND checkpoint_ns = ?"
                " AND checkpoint_id = ?",
                (self.tenant_id, thread_id, ns, checkpoint_id),
            )

    # -- async: inline -------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`."""
        return await self._call(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`."""
        found = await self._call(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`."""
        return await self._call(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`."""
        await self._call(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`."""
        await self._call(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`."""
        await self._call(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`."""
        await self._call(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`."""
        await self._call(self.prune, thread_ids, strategy=strategy)


class AsyncKeelgateSaver(KeelgateSaver):
    """:class:`KeelgateSaver` whose async methods leave the event loop free.

    They run on one thread of the saver's own, in the order LangGraph called them, so a
    task's pending writes never commit after the checkpoint submitted behind them.
    """

    def __init__(
        self,
        database: SaverDatabase,
        *,
        tenant_id: str,
        owner: object | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(database, tenant_id=tenant_id, owner=owner, serde=serde)
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"kg-saver-{uuid.uuid4().hex[:6]}"
        )
        self._lock = threading.Lock()

    @classmethod
    def sqlite(cls, path: str | Path | SqliteDatabase, *, tenant_id: str = "default") -> AsyncKeelgateSaver:
        """An async saver on a SQLite file (stdlib), one line."""
        db = path if isinstance(path, SqliteDatabase) else SqliteDatabase(path)
        return cls(_StdlibDatabase(db), tenant_id=tenant_id)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def close(self) -> None:
        """Stop the saver's thread (after the calls already submitted)."""
        self._executor.shutdown(wait=True)
