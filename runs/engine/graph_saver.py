"""LangGraph checkpoints on the site's database: ``KeelgateSaver`` over Django.

    saver = site_saver(tenant_id="acme")                      # unowned
    saver = site_saver(tenant_id="acme", fence=claim_fence)   # a worker's, fenced

The same SQL as the stdlib saver runs through Django's connection (SQLite or
PostgreSQL; tables ``kg_graph_checkpoints`` and ``kg_graph_writes``, migration
``runs.0003``). A graph run by the worker is a run: its thread is the run id, and the
worker's lease epoch (:mod:`runs.engine.fencing`) is the thread's owner, checked under
the run row's lock in every write's transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from keelgate.contrib.langgraph import KeelgateSaver, Sql
from keelgate.errors import LeaseLostError, StaleOwnerError
from runs.engine.fencing import Fence, check_fence


class _DjangoSql:
    """Django's cursor behind the saver's ``?`` placeholders."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._cursor.execute(sql.replace("?", "%s"), list(params))
        return [tuple(row) for row in self._cursor.fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._cursor.execute(sql.replace("?", "%s"), list(params))
        return int(self._cursor.rowcount)


class DjangoSaverDatabase:
    """:class:`~keelgate.contrib.langgraph.SaverDatabase` on the default Django database."""

    @contextmanager
    def write(self) -> Iterator[Sql]:
        """One ``transaction.atomic`` (IMMEDIATE on SQLite, per the site's settings)."""
        with transaction.atomic(), connection.cursor() as cursor:
            yield _DjangoSql(cursor)

    @contextmanager
    def read(self) -> Iterator[Sql]:
        """A read in one transaction, so a checkpoint and its writes agree."""
        with transaction.atomic(), connection.cursor() as cursor:
            yield _DjangoSql(cursor)

    def check_owner(self, sql: Sql, tenant_id: str, thread_id: str, owner: object | None) -> None:
        """A fenced saver writes only its run's thread, and only while its epoch is current."""
        if owner is None:
            return
        if not isinstance(owner, Fence) or owner.tenant_id != tenant_id or owner.run_id != thread_id:
            raise StaleOwnerError(f"{thread_id} is not the fenced run")
        try:
            check_fence(owner)
        except LeaseLostError as exc:
            raise StaleOwnerError(exc.detail) from exc


def site_saver(*, tenant_id: str, fence: Fence | None = None) -> KeelgateSaver:
    """The tenant's LangGraph saver on the site's database (owned by ``fence`` if given)."""
    saver = KeelgateSaver(DjangoSaverDatabase(), tenant_id=tenant_id)
    return saver if fence is None else saver.owned(fence)
