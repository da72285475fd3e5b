"""The engine's commit grouping (``keelgate.commits``) on the Django database.

A loop over the ORM stores holds one :class:`DjangoCommitGroup`: between two barriers
its checkpoint saves, key claims and audit events run in one transaction, and the
worker's fence (its lease epoch, ``runs.engine.fencing``) is checked once per transaction,
under a row lock that lasts until the commit, instead of once per write. Opened at
the first write, never before: on SQLite an open transaction holds the file's write
lock, and a barrier (a planner or tool call) must never wait with it held.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import transaction

from runs.engine.fencing import Fence, check_fence


class DjangoCommitGroup:
    """One database transaction per stretch between a loop's barriers.

    Writes by the holding thread join it; other threads (Django gives each its own
    connection) write as before. A write that raises inside the held transaction
    leaves the writes before it to the flush, as they would have been committed one
    by one; a database error aborts the whole transaction, as it always did.
    """

    def __init__(self, fence: Fence | None = None) -> None:
        self.fence = fence
        self._local = threading.local()

    def _state(self) -> Any:
        local = self._local
        if not hasattr(local, "holds"):
            local.holds, local.atomic, local.fenced = 0, None, False
        return local

    def hold(self) -> None:
        self._state().holds += 1

    def flush(self) -> None:
        local = self._state()
        atomic, local.atomic, local.fenced = local.atomic, None, False
        if atomic is not None:
            atomic.__exit__(None, None, None)

    def release(self) -> None:
        try:
            self.flush()
        finally:
            self._state().holds -= 1

    def discard(self) -> None:
        local = self._state()
        atomic, local.atomic, local.fenced = local.atomic, None, False
        try:
            if atomic is not None:
                transaction.set_rollback(True)
                atomic.__exit__(None, None, None)
        finally:
            local.holds -= 1

    @contextmanager
    def write(self) -> Iterator[None]:
        """One store write: fenced, inside the held transaction or in its own."""
        local = self._state()
        if not local.holds:
            with transaction.atomic():
                check_fence(self.fence)
                yield
            return
        if local.atomic is None:
            atomic = transaction.atomic()
            atomic.__enter__()
            local.atomic = atomic
        if not local.fenced:
            check_fence(self.fence)  # its row lock lasts until the flush
            local.fenced = True
        yield
