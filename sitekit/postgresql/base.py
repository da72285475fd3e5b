"""The pool's health check, without a round trip (``KEELGATE_DB_POOL``, the web processes).

Django's pool checks each connection it lends with an empty query
(``ConnectionPool.check_connection``, when ``CONN_HEALTH_CHECKS`` is on): one more round
trip for every request, as many as a ``GET /api/v1/runs`` makes for its page
(docs/performance.md#pool-check). A connection the server closed
while it sat in the pool (a restart, a failover, ``pg_terminate_backend``) has something
to read, the server's goodbye or the end of the stream, so :func:`check_pooled` looks
at the socket first: quiet, the connection is lent as it is; readable, it gets the
empty query, which fails on a dead connection, and the pool opens another. A network
path lost without a word shows only on use, as it would between any check and the
request; psycopg_pool's ``max_idle`` and ``max_lifetime`` retire old connections.

Django builds its pool with its own ``check`` and takes no other (a ``check`` among the
pool options is a second value for it), so :class:`DatabaseWrapper` builds the pool as
Django 5.2's ``pool`` property does, with this check: a change there needs the same here.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any, ClassVar

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg.pq import ConnStatus
from psycopg_pool import ConnectionPool


def check_pooled(conn: psycopg.Connection[Any]) -> None:
    """Raise if ``conn`` is closed, or if something arrived on it while idle and it fails a query."""
    if conn.closed or conn.pgconn.status != ConnStatus.OK:
        raise psycopg.OperationalError("the pooled connection is closed")
    if _readable(conn.fileno()):
        ConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether the socket has data, or its end, waiting (without blocking)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


class DatabaseWrapper(base.DatabaseWrapper):
    """Django's PostgreSQL connection, its pool checking lent connections with :func:`check_pooled`."""

    # Django's, which its type stubs leave out (annotations only: the values stay Django's).
    _connection_pools: ClassVar[dict[str, ConnectionPool[Any]]]
    _configure_connection: Callable[[psycopg.Connection[Any]], Any]

    @property
    def pool(self) -> ConnectionPool[Any] | None:
        options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            kwargs = self.get_connection_params()
            kwargs["autocommit"] = True  # as Django's: it sets the connection's mode itself
            pool = ConnectionPool(
                kwargs=kwargs,
                open=False,  # opened at the first connection, as Django's
                configure=self._configure_connection,
                check=check_pooled if self.settings_dict["CONN_HEALTH_CHECKS"] else None,
                **({} if options is True else options),
            )
            self._connection_pools.setdefault(self.alias, pool)  # the first thread's wins
        return self._connection_pools[self.alias]
