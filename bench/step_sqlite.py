"""1. Durable step cost on SQLite files: Keelgate vs LangGraph's SqliteSaver vs bare commits.

One step is a whole run of the scenario in ``_scenario.py`` (plan, one READ, one WRITE,
observe, verify), each on a new run id / thread id, all files in one scratch folder.
Keelgate runs on ``SqliteStores`` (one file, the loop grouping commits) and, as the
figure before grouping, on three files that commit every write alone. Its durable
commits are counted exactly by a trace callback in a calibration batch that is not
timed; the floor then performs that many bare ``INSERT`` + ``COMMIT`` transactions per
step.

A second pass repeats the comparison with ``synchronous=OFF`` on every connection: no
fsync, so what remains is the engines' CPU and SQLite's own work.

Bytes per step on disk are measured over untimed steps: the pages in use (``dbstat``) of
Keelgate's one file and of LangGraph's, before and after.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from bench._common import CommitCounter, Row, SqliteFloor, interleave, median, progress, quick, scratch
from bench._dbos import DbosStep
from bench._scenario import TENANT, SqliteKeelgate, SqliteLangGraph, langgraph_step, run_step

BENCH = "1. step, SQLite"
BENCH_OFF = "1b. step, SQLite, synchronous=OFF"


def count_commits(
    k: SqliteKeelgate, g: SqliteLangGraph, files: SqliteKeelgate, steps: int = 3
) -> dict[str, Any]:
    """Durable commits and SQL statements per step, for every engine (calibration, untimed)."""

    def keelgate(engine: SqliteKeelgate) -> CommitCounter:
        counter = CommitCounter()
        for label, conn in engine.connections().items():
            counter.attach(label, conn)

        async def go() -> None:
            for _ in range(steps):
                await run_step(engine.loop)

        asyncio.run(go())
        counter.detach()
        return counter

    counter = keelgate(k)
    before = keelgate(files)
    lg = CommitCounter()
    lg.attach("langgraph", g.conn)
    for _ in range(steps):
        langgraph_step(g.graph)
    lg.detach()
    return {
        "keelgate_commits": counter.total / steps,
        "keelgate_commits_by_store": {k_: v / steps for k_, v in counter.commits.items()},
        "keelgate_statements": sum(counter.statements.values()) / steps,
        "files_commits": before.total / steps,
        "files_statements": sum(before.statements.values()) / steps,
        "langgraph_commits": lg.total / steps,
        "langgraph_statements": sum(lg.statements.values()) / steps,
    }


def _pages(path: str, table: str | None = None) -> int:
    """Bytes of the pages in use in ``path`` (one table and its indexes if named), by ``dbstat``."""
    conn = sqlite3.connect(path)
    try:
        if table is None:
            row = conn.execute("SELECT sum(pgsize) FROM dbstat").fetchone()
        else:
            row = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name = ?1"
                " OR name IN (SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1)",
                (table,),
            ).fetchone()
    finally:
        conn.close()
    return int(row[0] or 0)


def storage(k: SqliteKeelgate, g: SqliteLangGraph, steps: int) -> dict[str, float]:
    """Bytes per step on disk (untimed): the pages ``steps`` new runs add to each file.

    Keelgate: its one file (checkpoints, keys, audit), and the checkpoint table alone with
    the JSON it holds. LangGraph: its file. Pages are 4 kB, so ``steps`` is large enough
    to make that grain small.
    """
    k_path = k.checkpoints.path
    g_path = g.conn.execute("PRAGMA database_list").fetchone()[2]
    known = set(k.checkpoints.runs(TENANT))
    before, before_ck = _pages(k_path), _pages(k_path, "checkpoints")

    async def go() -> None:
        for _ in range(steps):
            await run_step(k.loop)

    asyncio.run(go())
    keelgate, checkpoints = _pages(k_path) - before, _pages(k_path, "checkpoints") - before_ck
    new = [r for r in k.checkpoints.runs(TENANT) if r not in known]
    json_bytes = sum(len(s.to_json()) for r in new for s in k.checkpoints.history(TENANT, r))
    lg_before = _pages(g_path)
    for _ in range(steps):
        langgraph_step(g.graph)
    return {
        "keelgate_bytes": keelgate / steps,
        "keelgate_checkpoint_bytes": checkpoints / steps,
        "keelgate_json_bytes": json_bytes / steps,
        "langgraph_bytes": (_pages(g_path) - lg_before) / steps,
    }


def _set_sync(conns: list[Any], mode: str) -> None:
    for conn in conns:
        conn.execute(f"PRAGMA synchronous = {mode}")


def run() -> list[Row]:
    """Both passes; rows in microseconds per step."""
    batch, rounds = (6, 4) if quick() else (30, 9)
    rows: list[Row] = []
    with scratch("step-sqlite") as root:
        k = SqliteKeelgate(root)
        (root / "files").mkdir()
        files = SqliteKeelgate(root / "files", one_file=False)
        g = SqliteLangGraph(root)
        floor = SqliteFloor(root / "floor.sqlite3")
        dbos = DbosStep(f"sqlite:///{root / 'dbos.sqlite3'}")
        runner = asyncio.Runner()
        try:
            counts = count_commits(k, g, files)
            commits = round(counts["keelgate_commits"])
            progress(
                f"{BENCH}: Keelgate commits {counts['keelgate_commits']:.1f}/step "
                f"({counts['files_commits']:.1f} on three files), "
                f"LangGraph {counts['langgraph_commits']:.1f}/step"
            )
            sizes = storage(k, g, 100 if quick() else 400)
            progress(
                f"{BENCH}: bytes/step on disk: Keelgate {sizes['keelgate_bytes']:.0f} (checkpoint"
                f" table {sizes['keelgate_checkpoint_bytes']:.0f}, checkpoint JSON"
                f" {sizes['keelgate_json_bytes']:.0f}); LangGraph {sizes['langgraph_bytes']:.0f}"
            )

            def timed(engine: SqliteKeelgate) -> Any:
                async def keelgate_batch() -> None:
                    for _ in range(batch):
                        await run_step(engine.loop)

                def case() -> float:
                    t = time.perf_counter()
                    runner.run(keelgate_batch())
                    return (time.perf_counter() - t) / batch * 1e6

                return case

            keelgate, keelgate_files = timed(k), timed(files)

            def langgraph() -> float:
                t = time.perf_counter()
                for _ in range(batch):
                    langgraph_step(g.graph)
                return (time.perf_counter() - t) / batch * 1e6

            def bare() -> float:
                t = time.perf_counter()
                for _ in range(batch):
                    floor.commits(commits)
                return (time.perf_counter() - t) / batch * 1e6

            cases = {
                "keelgate": keelgate,
                "keelgate_files": keelgate_files,
                "langgraph": langgraph,
                "floor": bare,
            }

            def dbos_case() -> float:
                t = time.perf_counter()
                for _ in range(batch):
                    dbos.step()
                return (time.perf_counter() - t) / batch * 1e6

            for case in [*cases.values(), dbos_case]:  # warm up: imports, caches, first pages
                case()
            for name, passes in ((BENCH, "FULL"), (BENCH_OFF, "OFF")):
                conns = [*k.connections().values(), *files.connections().values(), g.conn, floor.db]
                _set_sync(conns, passes)
                # DBOS's own connections keep its settings: it takes part in the FULL pass only.
                values = interleave(
                    name, {**cases, "dbos": dbos_case} if passes == "FULL" else cases, rounds=rounds
                )
                rows.extend(_rows(name, values, counts, commits, batch, sizes if passes == "FULL" else None))
            _set_sync([*k.connections().values(), *files.connections().values(), g.conn, floor.db], "FULL")
        finally:
            runner.close()
            dbos.close()
            k.close()
            files.close()
            g.close()
            floor.close()
    return rows


def _rows(
    name: str,
    values: dict[str, list[float]],
    counts: dict[str, Any],
    commits: int,
    batch: int,
    sizes: dict[str, float] | None = None,
) -> list[Row]:
    km, bm, lm, fm = (median(values[n]) for n in ("keelgate", "keelgate_files", "langgraph", "floor"))
    common = {"batch": batch}
    dbos = []
    if "dbos" in values:
        dm = median(values["dbos"])
        dbos.append(
            Row(
                name,
                "DBOS 3 workflow of five @DBOS.step (SQLite system database)",
                "step",
                "us/step",
                dm,
                values["dbos"],
                ratio=km / dm,
                ratio_to="Keelgate / DBOS",
                extra=common,
            )
        )
    rows = [
        Row(
            name,
            "Keelgate, SqliteStores: one file, grouped commits",
            "step",
            "us/step",
            km,
            values["keelgate"],
            extra={
                **common,
                "commits_per_step": counts["keelgate_commits"],
                "commits_by_store": counts["keelgate_commits_by_store"],
                "statements_per_step": counts["keelgate_statements"],
                "vs_langgraph": km / lm,
                "vs_floor": km / fm,
                **_sizes(sizes, "keelgate"),
            },
        ),
        Row(
            name,
            "Keelgate, three files, a commit per write (before grouping)",
            "step",
            "us/step",
            bm,
            values["keelgate_files"],
            ratio=bm / lm,
            ratio_to="vs LangGraph",
            extra={
                **common,
                "commits_per_step": counts["files_commits"],
                "statements_per_step": counts["files_statements"],
                "vs_langgraph": bm / lm,
            },
        ),
        Row(
            name,
            "LangGraph StateGraph + SqliteSaver, durability=sync",
            "step",
            "us/step",
            lm,
            values["langgraph"],
            ratio=km / lm,
            ratio_to="Keelgate / LangGraph",
            extra={
                **common,
                "commits_per_step": counts["langgraph_commits"],
                "statements_per_step": counts["langgraph_statements"],
                **_sizes(sizes, "langgraph"),
            },
        ),
        Row(
            name,
            f"floor: {commits} x bare INSERT+COMMIT (WAL, synchronous=FULL)"
            if "OFF" not in name
            else f"floor: {commits} x bare INSERT+COMMIT (WAL, synchronous=OFF)",
            "step",
            "us/step",
            fm,
            values["floor"],
            ratio=km / fm,
            ratio_to="Keelgate / floor",
            extra={**common, "commits_per_step": commits, "us_per_commit": fm / commits},
        ),
    ]
    rows.extend(dbos)  # after Keelgate's row: the table's first row per pass stays Keelgate's
    return rows


def _sizes(sizes: dict[str, float] | None, system: str) -> dict[str, Any]:
    """The storage figures of one system for its row (the FULL pass only)."""
    if sizes is None:
        return {}
    out: dict[str, Any] = {"bytes_per_step": round(sizes[f"{system}_bytes"])}
    if system == "keelgate":
        out["checkpoint_table_bytes_per_step"] = round(sizes["keelgate_checkpoint_bytes"])
        out["checkpoint_json_bytes_per_step"] = round(sizes["keelgate_json_bytes"])
    return out
