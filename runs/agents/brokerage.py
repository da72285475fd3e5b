"""The paper brokerage: a demo downstream system of record in its own SQLite file.

It behaves like a payment API that honours idempotency keys (as Stripe does): the first
request with a key executes, a repeated key returns the original result. It counts
executions and replays separately, so if Keelgate ever sent a WRITE twice, a replay
would show it. It can be told to hang or to fail after executing, to manufacture
unknown outcomes on purpose.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings

Mode = Literal["normal", "hang", "fail"]

PRICES = {"ACME": 101.5, "BETA": 42.0, "GAMMA": 7.25}


_READY: set[tuple[str, int, int, int]] = set()
"""The files this process set up, as :func:`_file_of` names them."""


def _file_of(path: str) -> tuple[str, int, int, int] | None:
    """The file at ``path`` as (path, device, inode, change time): another file once it is
    deleted and made again, even under a reused inode number; None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return path, st.st_dev, st.st_ino, st.st_ctime_ns


class BrokerageUnavailable(ConnectionError):
    """The brokerage failed after accepting the order (mode ``fail``)."""


@dataclass(frozen=True)
class LedgerEntry:
    """One idempotency key as the brokerage saw it."""

    key: str
    symbol: str
    side: str
    quantity: int
    executions: int
    replays: int
    result: dict[str, Any]


class PaperBrokerage:
    """Orders by idempotency key, in ``settings.KEELGATE_PAPER_BROKERAGE``."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or settings.KEELGATE_PAPER_BROKERAGE
        file = _file_of(self.path)
        if file is not None and file in _READY:
            return  # every decision builds the agent, and so this: the file is set up already
        with closing(self._connect()) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS orders (key TEXT PRIMARY KEY, symbol TEXT, side TEXT,"
                " quantity INTEGER, result TEXT, executions INTEGER, replays INTEGER)"
            )
            db.execute("CREATE TABLE IF NOT EXISTS control (name TEXT PRIMARY KEY, value TEXT)")
        file = _file_of(self.path)
        if file is not None:
            _READY.add(file)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        return db

    def quote(self, symbol: str) -> float:
        """The (fixed) paper price of a symbol."""
        return PRICES.get(symbol, 10.0)

    def set_mode(self, mode: Mode, *, hang_seconds: float = 3600.0) -> None:
        """normal, hang (sleep before executing) or fail (raise after executing)."""
        with closing(self._connect()) as db:
            db.execute("INSERT OR REPLACE INTO control VALUES ('mode', ?)", (mode,))
            db.execute("INSERT OR REPLACE INTO control VALUES ('hang_seconds', ?)", (str(hang_seconds),))

    def mode(self) -> tuple[Mode, float]:
        """The current mode and hang time."""
        with closing(self._connect()) as db:
            rows = dict(db.execute("SELECT name, value FROM control").fetchall())
        return rows.get("mode", "normal"), float(rows.get("hang_seconds", "3600"))

    def place_order(self, key: str, symbol: str, side: str, quantity: int) -> dict[str, Any]:
        """Execute once per key; a repeated key returns the first result and counts a replay."""
        mode, hang = self.mode()
        if mode == "hang":
            time.sleep(hang)
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT result FROM orders WHERE key = ?", (key,)).fetchone()
            if row is not None:
                db.execute("UPDATE orders SET replays = replays + 1 WHERE key = ?", (key,))
                db.execute("COMMIT")
                return dict(json.loads(row[0]))
            price = self.quote(symbol)
            count = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
            result = {
                "order_id": f"PB-{count + 1:06d}",
                "symbol": symbol,
                "side": side,
                "quantity": quantity,
                "price": price,
                "status": "filled",
            }
            db.execute(
                "INSERT INTO orders VALUES (?, ?, ?, ?, ?, 1, 0)",
                (key, symbol, side, quantity, json.dumps(result, sort_keys=True)),
            )
            db.execute("COMMIT")
        if mode == "fail":
            raise BrokerageUnavailable("connection reset after the order was accepted")
        return result

    def ledger(self) -> list[LedgerEntry]:
        """Every key the brokerage has seen, in order."""
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT key, symbol, side, quantity, executions, replays, result FROM orders ORDER BY rowid"
            ).fetchall()
        return [LedgerEntry(k, s, sd, q, e, r, json.loads(res)) for k, s, sd, q, e, r, res in rows]

    def entry(self, key: str) -> LedgerEntry | None:
        """The ledger entry for one key, or None."""
        return next((e for e in self.ledger() if e.key == key), None)
