"""How every engine store opens its SQLite file, so all of them are equally durable."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["BUSY_TIMEOUT_MS", "open_durable"]

BUSY_TIMEOUT_MS = 30_000
"""Competing writers (threads or processes) wait this long instead of failing."""


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
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    except BaseException:
        conn.close()
        raise
    return conn
