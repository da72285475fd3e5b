"""LangGraph's own checkpointer conformance suite against KeelgateSaver: ``python -m`` prints the reports.

``make test`` runs it (after pytest) so the pass counts are in its output; the tests in
``test_saver_conformance.py`` assert the same reports pass in full.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport

from keelgate.contrib.langgraph import AsyncKeelgateSaver, KeelgateSaver

REQUIRED = {
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "prune",
    "delete_for_runs",
    "copy_thread",
}


def _fresh_path() -> Path:
    return Path(tempfile.mkdtemp(prefix="kg-conformance-")) / f"{uuid.uuid4().hex}.sqlite3"


@checkpointer_test(name="KeelgateSaver.sqlite")
async def keelgate_sqlite() -> AsyncGenerator[KeelgateSaver, None]:
    """A fresh file per capability suite."""
    yield KeelgateSaver.sqlite(_fresh_path(), tenant_id="acme")


@checkpointer_test(name="AsyncKeelgateSaver.sqlite")
async def keelgate_async_sqlite() -> AsyncGenerator[KeelgateSaver, None]:
    """The async saver, its calls on a thread of its own."""
    saver = AsyncKeelgateSaver.sqlite(_fresh_path(), tenant_id="acme")
    yield saver
    saver.close()


def pass_counts(report: CapabilityReport) -> str:
    """One line per capability: passed/total."""
    lines = []
    for name, result in sorted(report.results.items()):
        total = result.tests_passed + result.tests_failed
        lines.append(f"  {name:16s} {result.tests_passed}/{total} passed")
    return "\n".join(lines)


def main() -> int:
    """Run the suite against each saver and print its report; non-zero if any fails."""
    failed = 0
    for registered in (keelgate_sqlite, keelgate_async_sqlite):
        report = asyncio.run(validate(registered))
        report.print_report()
        print(pass_counts(report))
        passed = sum(r.tests_passed for r in report.results.values())
        print(f"  {registered.name}: {passed} tests passed, level {report.conformance_level()}\n")
        failed += 0 if report.passed_all() else 1
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
