"""Every durable store of a loop in one SQLite file, so a step's writes share commits.

    stores = SqliteStores("keelgate.sqlite3")
    gateway = Gateway(tools, grants=..., idempotency=stores.idempotency, audit=stores.audit)
    loop = Loop(planner=..., gateway=gateway, checkpoints=stores.checkpoints)

The loop sees that the three stores write through one connection and groups their
writes between barriers (see :mod:`keelgate.commits`): a step commits only where a write
must be durable, with the same crash guarantees (docs/performance.md#round-trips).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from keelgate._sqlite import SqliteDatabase
from keelgate.audit import SqliteAuditLog
from keelgate.checkpoint import SqliteCheckpointStore
from keelgate.clock import Clock
from keelgate.idempotency import SqliteIdempotencyStore

__all__ = ["SqliteDatabase", "SqliteStores"]


class SqliteStores:
    """A checkpoint store, an idempotency store and an audit log over one file."""

    def __init__(self, path: str | Path = ":memory:", *, clock: Clock | None = None) -> None:
        self.database = SqliteDatabase(path)
        try:
            self.checkpoints = SqliteCheckpointStore(self.database)
            self.idempotency = SqliteIdempotencyStore(self.database)
            self.audit = SqliteAuditLog(self.database, clock=clock)
        except BaseException:
            self.database.close()
            raise

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        return self.database.path

    def close(self) -> None:
        """Close the file; every store on it is unusable afterwards."""
        self.database.close()

    def __enter__(self) -> SqliteStores:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStores({self.path!r})"
