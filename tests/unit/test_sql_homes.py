"""Hand-written SQL in the site lives in modules whose name says postgresql.

The readable default of every store and service is the ORM; a statement written by hand
is a PostgreSQL fast path, and a newcomer finds each one in a ``*postgresql*`` module
(ARCHITECTURE.md, "Where a new feature goes"). The few other homes are listed with why.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("sitekit", "tenants", "audit", "runs", "approvals", "notifications", "keelgate_site")
STATEMENT = re.compile(r"^\s*(SELECT|INSERT INTO|UPDATE|DELETE FROM|WITH)\s|\bFOR UPDATE\b|\bON CONFLICT\b")

ELSEWHERE = {
    "runs/agents/brokerage.py": "the demo agent's downstream ledger, a SQLite file of its own",
    "sitekit/keyset_sql.py": "the keyset page of the hottest lists, built once per shape",
}
"""Modules with statements of their own that are not a store's fast path, and why."""


def _statements(path: Path) -> list[str]:
    """The string literals of ``path`` that read as SQL statements (docstrings aside)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and STATEMENT.search(node.value)
    ]


def test_hand_written_statements_live_in_postgresql_modules():
    """Outside ``*postgresql*`` modules (and the listed homes), no string literal is a SQL statement."""
    strays = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            name = path.relative_to(ROOT).as_posix()
            if "postgresql" in name or "/migrations/" in name or name in ELSEWHERE:
                continue
            found = _statements(path)
            if found:
                strays[name] = found[:3]
    assert strays == {}


def test_every_listed_exception_still_writes_sql():
    """An entry of ELSEWHERE that no longer holds a statement is removed from the list."""
    assert all(_statements(ROOT / name) for name in ELSEWHERE)
