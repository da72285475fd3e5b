"""Client CPU of one commit-group message: psycopg's pipeline against one mogrified text.

``python -m bench.message_cost`` (``BENCH_PG_URL``, default the test server). Issue 28
moved the PostgreSQL commit group (``sitekit/postgresql/commits.py``) from a message
built by hand (each statement bound on the client, joined with ``;``, sent as one simple
query) to psycopg's pipeline mode with prepared statements. This times one message of
the approve path's shape (three updates and a read) both ways on one connection, so the
trade is measured, not guessed: the pipeline costs the client more Python per message
(a cursor per statement, whose row count a check reads) and the server less (each
statement parsed and planned once per connection). Not part of ``make bench``; figures
on ``docs/performance.md#issue-28``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import ClientCursor, Cursor

URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/test")
STATEMENTS: list[tuple[str, list[Any]]] = [
    ("UPDATE bench_message SET a = %s, b = %s::jsonb WHERE id = %s", ["y", '{"k": 1}', i]) for i in (1, 2, 3)
]
STATEMENTS.append(("SELECT id, a, c FROM bench_message WHERE id = %s", [4]))
_TUPLES_OK = 2


def main() -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE bench_message (id int primary key, a text, b jsonb, c timestamptz)")
        conn.execute(
            "INSERT INTO bench_message SELECT g, 'x', '{}'::jsonb, now() FROM generate_series(1, 100) g"
        )
        binder = ClientCursor(conn)

        def pipeline() -> None:
            cursors = []
            with conn.pipeline():
                for sql, params in STATEMENTS:
                    cursor = Cursor(conn)
                    cursor.execute(sql, params, prepare=True)
                    cursors.append(cursor)
            for cursor in cursors:
                if cursor.pgresult is not None and cursor.pgresult.status == _TUPLES_OK:
                    cursor.fetchall()

        def mogrified_text() -> None:
            cursor = conn.cursor()
            cursor.execute("; ".join(binder.mogrify(sql, params) for sql, params in STATEMENTS))
            while True:
                if cursor.pgresult is not None and cursor.pgresult.status == _TUPLES_OK:
                    cursor.fetchall()
                if not cursor.nextset():
                    return

        ways: list[Callable[[], None]] = [pipeline, mogrified_text]
        for way in ways * 3:  # alternated, so both see the same moments of the machine
            for _ in range(100):
                way()
            n = 2000
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(n):
                way()
            cpu_us = (time.process_time() - cpu) / n * 1e6
            wall_us = (time.perf_counter() - wall) / n * 1e6
            print(f"{way.__name__:15s} client CPU {cpu_us:5.0f} us/message, wall {wall_us:5.0f} us/message")


if __name__ == "__main__":
    main()
