"""``python -m bench`` (``make bench``, ``make bench QUICK=1``): every benchmark, one table.

Options: ``--only 1,4`` runs some benchmarks; ``--json PATH`` writes elsewhere than
``bench/results/latest.json``. Environment: ``QUICK=1`` for the two-minute pass,
``BENCH_PG_URL`` for an administrative PostgreSQL URL (default
``postgres://postgres@127.0.0.1:5432/test``; a scratch database ``keelgate_bench`` is
created next to it and dropped at the end).

A benchmark that cannot run prints a ``not measured: <why>`` row; none of them fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench._common import RESULTS, Row, fmt, progress, quick, write_json
from bench._scorecard import scorecard

BENCHES: dict[str, tuple[str, str]] = {
    "1": ("bench.step_sqlite", "durable step cost, SQLite"),
    "2": ("bench.step_postgres", "durable step cost, PostgreSQL"),
    "3": ("bench.workers", "worker throughput, PostgreSQL"),
    "3b": ("bench.step_processes", "the step in 1 and 2 processes, PostgreSQL"),
    "4": ("bench.audit_chain", "the audit log: appends, checkpoints, verification, proofs"),
    "5": ("bench.live", "live inbox latency"),
    "6": ("bench.api_load", "API throughput"),
    "7": ("bench.sigkill", "duplicates under SIGKILL"),
    "8": ("bench.inbox_page", "inbox page at 10,000 pending approvals, PostgreSQL"),
    "9": ("bench.graph_sigkill", "a LangGraph graph under SIGKILL: ToolNode against GatedToolNode"),
    "10": ("bench.audit_review", "the audit review page at 1,000,000 events, PostgreSQL"),
    "11": ("bench.mcp_sigkill", "MCP WRITE calls under SIGKILL: straight, a plain SDK proxy, the gateway"),
    "12": ("bench.mcp_cost", "the MCP gateway's added cost: READ against a proxy, WRITE against the step"),
}


def _load(number: str) -> Callable[[], list[Row]]:
    import importlib

    module = importlib.import_module(BENCHES[number][0])
    if number == "5":
        return module.run_inbox  # type: ignore[no-any-return]
    return module.run  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated benchmark numbers (default: all)")
    parser.add_argument("--json", default=str(RESULTS / "latest.json"))
    args = parser.parse_args(argv)
    chosen = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHES)

    started = time.monotonic()
    load_before = os.getloadavg()
    progress(f"bench: {'QUICK' if quick() else 'full'} pass, benchmarks {', '.join(chosen)}")
    rows: list[Row] = []
    from bench import _pg

    try:
        for number in chosen:
            title = BENCHES[number][1]
            progress(f"== {number}. {title} ==")
            t = time.monotonic()
            try:
                rows.extend(_load(number)())
            except Exception as exc:  # a benchmark that breaks is a row, not a crash
                traceback.print_exc()
                rows.append(
                    Row(f"{number}. {title}", f"not measured: {type(exc).__name__}: {exc}", "", "", None)
                )
            progress(f"== {number}. done in {time.monotonic() - t:.1f}s ==")
    finally:
        _pg.teardown()

    elapsed = time.monotonic() - started
    load_after = os.getloadavg()
    table = render(rows) + "\n" + scorecard(rows)
    print(table)
    load = f"{os.cpu_count()} CPUs; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    print(f"\n{'QUICK' if quick() else 'full'} pass in {elapsed:.0f}s on {platform.node()} ({load})")
    write_json(
        Path(args.json),
        {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "quick": quick(),
            "elapsed_seconds": elapsed,
            "python": sys.version.split()[0],
            "machine": {
                "node": platform.node(),
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "loadavg_before": load_before,
                "loadavg_after": load_after,
            },
            "command": " ".join(
                [sys.executable, "-m", "bench", *(argv if argv is not None else sys.argv[1:])]
            ),
            "rows": [r.as_json() for r in rows],
            "table": table,
        },
    )
    progress(f"wrote {args.json}")
    return 0


_EXTRA_COLUMNS = (
    ("commits_per_step", "commits/step"),
    ("transactions_per_step", "xacts/step"),
    ("queries_per_step", "queries/step"),
    ("bytes_per_step", "bytes/step"),
    ("round_trips_per_request", "round trips/req"),
    ("scaling", "scaling"),
    ("duplicates", "duplicates"),
    ("unknown_outcomes", "unknown"),
)


def render(rows: list[Row]) -> str:
    """The table: one block per benchmark, medians, ratios and the telling extras."""
    lines: list[str] = []
    width = max([len(r.system) for r in rows] + [20])
    width = min(width, 78)
    current = None
    for r in rows:
        if r.bench != current:
            current = r.bench
            lines.append("")
            lines.append(r.bench)
            lines.append("-" * len(r.bench))
        if r.median is None:
            lines.append(f"  {r.system}")
            continue
        extras = []
        for key, label in _EXTRA_COLUMNS:
            if key in r.extra and r.extra[key] is not None:
                value = r.extra[key]
                extras.append(f"{label} {fmt(value) if isinstance(value, float) else value}")
        ratio = f"{r.ratio:.2f}x ({r.ratio_to})" if r.ratio is not None else ""
        system = r.system if len(r.system) <= width else r.system[: width - 1] + "…"
        lines.append(
            f"  {system:<{width}} {fmt(r.median, 4):>9} {r.unit:<10} {ratio:<34} {'; '.join(extras)}"
        )
        if r.note:
            lines.append(f"  {'':<{width}}   {r.note}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
