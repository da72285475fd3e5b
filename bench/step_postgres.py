"""2. Durable step cost on PostgreSQL: the Django stores vs LangGraph's PostgresSaver vs bare commits.

The same step as benchmark 1. Keelgate runs over the PostgreSQL stores
(``runs.engine.stores_postgresql``, ``audit.store_postgresql``) exactly as
``runs.engine.build_loop`` wires them for the worker (``database_stores``: one commit
group, ``sitekit.postgresql.commits``), fenced by the run's
lease epoch, with a ``Run`` row per step created beforehand (untimed). Durable commits
are counted twice: on the client, as
transactions that changed or locked a row (an execute wrapper and a hook on commit),
and on the server, as the change of ``pg_stat_database.xact_commit`` for the scratch
database, which also counts read-only transactions.

A fifth case (FULL pass) drives each step with its own ``asyncio.run``, as
``runs/engine/worker.py`` drove each run before it kept one ``asyncio.Runner``: Django
keeps connections per thread, but per event loop inside a running loop, so every
``asyncio.run`` opens a new PostgreSQL connection (and prepares the commit group's
statements again).
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench import _pg
from bench._common import Row, interleave, median, progress, quick
from bench._dbos import DbosStep
from bench._scenario import AGENT, AS_OF, GOAL, TENANT, keelgate_loop, langgraph_graph, langgraph_step

BENCH = "2. step, PostgreSQL"

_WRITE_HEADS = ("INSERT", "UPDATE", "DELETE")


class DjangoTxnCounter:
    """Counts statements and transactions on one Django connection; writes are what fsync."""

    def __init__(self, wrapper: Any) -> None:
        self.wrapper = wrapper
        self.queries = 0
        self.transactions = 0
        self.write_commits = 0
        self._dirty = False

    def _execute(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        text = sql.lstrip().upper()  # a commit group's message: its statements joined by "; "
        write = text.startswith(_WRITE_HEADS) or "FOR UPDATE" in text
        self.queries += 1
        if self.wrapper.in_atomic_block:
            self._dirty = self._dirty or write
        else:  # autocommit: the statement is its own transaction
            self.transactions += 1
            self.write_commits += int(write)
        return execute(sql, params, many, context)

    @contextmanager
    def attached(self) -> Iterator[DjangoTxnCounter]:
        original = self.wrapper.commit

        def commit() -> None:
            self.transactions += 1
            self.write_commits += int(self._dirty)
            self._dirty = False
            original()

        self.wrapper.commit = commit
        try:
            with self.wrapper.execute_wrapper(self._execute):
                yield self
        finally:
            del self.wrapper.commit


def _new_runs(n: int) -> list[str]:
    """``n`` Run rows leased at epoch 1, as a worker's claim leaves them (untimed).

    Then ``ANALYZE``, as autovacuum does within a minute on a live database: right after
    a bulk insert the planner has no statistics and picks another index for the lease and
    projection lookups, ten times slower (80 us against 675 us for the fence check on
    3,000 runs), which would measure the bench's own setup, not the steady state.
    """
    from django.db import connection

    from runs.models import Run, RunStatus

    ids = [uuid.uuid4().hex for _ in range(n)]
    Run.objects.bulk_create(
        [
            Run(
                tenant_id=TENANT,
                run_id=r,
                agent=AGENT,
                goal=GOAL,
                as_of=AS_OF,
                status=RunStatus.RUNNING,
                lease_epoch=1,
                lease_owner="bench",
            )
            for r in ids
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return ids


async def keelgate_step(run_id: str) -> None:
    """One step on the Django stores, fenced like the worker's."""
    from runs.engine.fencing import Fence
    from runs.engine.loops import database_stores

    checkpoints, idempotency, audit = database_stores(Fence(TENANT, run_id, 1))
    loop = keelgate_loop(checkpoints=checkpoints, idempotency=idempotency, audit=audit)
    result = await loop.run(goal=GOAL, tenant_id=TENANT, agent_id=AGENT, as_of=AS_OF, run_id=run_id)
    if not result.goal_reached:
        raise RuntimeError(f"the step stopped with {result.stop_reason}")


def _stats_after(previous: int | None = None) -> int:
    """``xact_commit`` once every closed backend has reported (it reports on exit)."""
    time.sleep(0.3)
    last = _pg.xact_commits()
    for _ in range(30):
        time.sleep(0.2)
        now = _pg.xact_commits()
        if now == last:
            return now
        last = now
    return last


class PgFloor:
    """Bare ``INSERT`` + ``COMMIT`` transactions on one psycopg connection."""

    def __init__(self) -> None:
        import psycopg

        self.conn = psycopg.connect(_pg.BENCH_URL)
        self.conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, v bytea)")
        self.conn.commit()
        self.payload = b"x" * 64

    def commits(self, n: int) -> None:
        conn = self.conn
        for _ in range(n):
            conn.execute("INSERT INTO bench_floor (v) VALUES (%s)", (self.payload,))
            conn.commit()

    def close(self) -> None:
        self.conn.close()


class CountingSaver:
    """Counts a saver's writes: each ``put`` / ``put_writes`` is one pipelined transaction."""

    def __init__(self, saver: Any) -> None:
        self.puts = 0
        put, put_writes = saver.put, saver.put_writes

        def counted_put(*a: Any, **k: Any) -> Any:
            self.puts += 1
            return put(*a, **k)

        def counted_put_writes(*a: Any, **k: Any) -> Any:
            self.puts += 1
            return put_writes(*a, **k)

        saver.put, saver.put_writes = counted_put, counted_put_writes


def calibrate(steps: int = 3) -> dict[str, Any]:
    """Commits, transactions and queries per step for Keelgate and LangGraph (untimed)."""
    from django.db import connections
    from langgraph.checkpoint.postgres import PostgresSaver

    ids = _new_runs(steps)
    connections.close_all()
    before = _stats_after()

    async def go() -> DjangoTxnCounter:
        counter = DjangoTxnCounter(connections["default"])
        with counter.attached():
            for r in ids:
                await keelgate_step(r)
        connections["default"].close()
        return counter

    counter = asyncio.run(go())
    gc.collect()
    after = _stats_after()
    with PostgresSaver.from_conn_string(_pg.BENCH_URL) as saver:
        saver.setup()
    lg_before = _stats_after()
    with PostgresSaver.from_conn_string(_pg.BENCH_URL) as saver:
        counting = CountingSaver(saver)
        graph = langgraph_graph(saver)
        for _ in range(steps):
            langgraph_step(graph)
    lg_after = _stats_after()
    return {
        "keelgate_commits": counter.write_commits / steps,
        "keelgate_transactions_client": counter.transactions / steps,
        "keelgate_transactions_server": (after - before) / steps,
        "keelgate_queries": counter.queries / steps,
        "langgraph_commits": counting.puts / steps,
        "langgraph_transactions_server": (lg_after - lg_before) / steps,
    }


_KEELGATE_TABLES = ("runs_checkpoint", "runs_idempotencyrecord", "audit_auditevent")
_LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def _table_bytes(tables: tuple[str, ...]) -> int:
    """Heap, TOAST and indexes of ``tables``, as on disk."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relname = ANY(%s)",
            [list(tables)],
        )
        return int(cursor.fetchone()[0] or 0)


def storage(steps: int) -> dict[str, float]:
    """Bytes per step on disk (untimed): what ``steps`` new runs add to each system's tables.

    Keelgate: checkpoints, idempotency keys, audit events (the ``Run`` row is the run's, not
    the step's, and is left out). LangGraph: its three checkpoint tables. Also the
    checkpoint table alone (heap and indexes), the checkpoint JSON Keelgate saves per step
    (read back through the store) and the size of the rows PostgreSQL stores for it.
    """
    from django.db import connection
    from langgraph.checkpoint.postgres import PostgresSaver

    from runs.engine.stores import DjangoCheckpointStore

    ids = _new_runs(steps)
    before, before_ck = _table_bytes(_KEELGATE_TABLES), _table_bytes(("runs_checkpoint",))

    async def go() -> None:
        for r in ids:
            await keelgate_step(r)

    asyncio.run(go())
    keelgate = (_table_bytes(_KEELGATE_TABLES) - before) / steps
    checkpoint_table = (_table_bytes(("runs_checkpoint",)) - before_ck) / steps
    store = DjangoCheckpointStore()
    json_bytes = sum(len(s.to_json().encode()) for r in ids for s in store.history(TENANT, r))
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(pg_column_size(c.*)) FROM runs_checkpoint c WHERE run_id = ANY(%s)", [ids])
        (stored_bytes,) = cursor.fetchone()
    with PostgresSaver.from_conn_string(_pg.BENCH_URL) as saver:
        graph = langgraph_graph(saver)
        langgraph_step(graph)  # tables created and first pages allocated
        lg_before = _table_bytes(_LANGGRAPH_TABLES)
        for _ in range(steps):
            langgraph_step(graph)
    langgraph = (_table_bytes(_LANGGRAPH_TABLES) - lg_before) / steps
    return {
        "keelgate_bytes": keelgate,
        "keelgate_checkpoint_bytes": checkpoint_table,
        "keelgate_json_bytes": json_bytes / steps,
        "keelgate_stored_json_bytes": int(stored_bytes) / steps,
        "langgraph_bytes": langgraph,
    }


def run() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH, f"not measured: {why}", "", "", None)]
    _pg.setup_django()
    from django.db import connections
    from langgraph.checkpoint.postgres import PostgresSaver

    batch, rounds = (4, 3) if quick() else (20, 9)
    counts = calibrate()
    sizes = storage(20 if quick() else 200)
    progress(
        f"{BENCH}: bytes/step on disk: Keelgate {sizes['keelgate_bytes']:.0f} (checkpoint table "
        f"{sizes['keelgate_checkpoint_bytes']:.0f}, checkpoint JSON {sizes['keelgate_json_bytes']:.0f}, "
        f"its rows {sizes['keelgate_stored_json_bytes']:.0f}); LangGraph {sizes['langgraph_bytes']:.0f}"
    )
    commits = round(counts["keelgate_commits"])
    progress(
        f"{BENCH}: Keelgate {counts['keelgate_commits']:.1f} write commits/step "
        f"({counts['keelgate_transactions_server']:.1f} transactions by pg_stat_database, "
        f"{counts['keelgate_queries']:.0f} queries); LangGraph {counts['langgraph_commits']:.1f} write "
        f"commits ({counts['langgraph_transactions_server']:.1f} transactions)"
    )
    runner = asyncio.Runner()
    floor = PgFloor()
    manager = PostgresSaver.from_conn_string(_pg.BENCH_URL)
    saver = manager.__enter__()
    dbos = DbosStep(_pg.BENCH_URL.replace("postgres://", "postgresql://", 1))  # its tables in schema dbos
    try:
        graph = langgraph_graph(saver)

        async def keelgate_batch(ids: list[str]) -> None:
            for r in ids:
                await keelgate_step(r)

        def keelgate() -> float:
            ids = _new_runs(batch)
            t = time.perf_counter()
            runner.run(keelgate_batch(ids))
            return (time.perf_counter() - t) / batch * 1e6

        def keelgate_as_worker() -> float:
            ids = _new_runs(batch)
            t = time.perf_counter()
            for r in ids:
                asyncio.run(keelgate_step(r))
            elapsed = time.perf_counter() - t
            gc.collect()  # closes the connections those loops left behind (untimed)
            return elapsed / batch * 1e6

        def langgraph() -> float:
            t = time.perf_counter()
            for _ in range(batch):
                langgraph_step(graph)
            return (time.perf_counter() - t) / batch * 1e6

        def bare() -> float:
            t = time.perf_counter()
            for _ in range(batch):
                floor.commits(commits)
            return (time.perf_counter() - t) / batch * 1e6

        def dbos_case() -> float:
            t = time.perf_counter()
            for _ in range(batch):
                dbos.step()
            return (time.perf_counter() - t) / batch * 1e6

        cases = {"keelgate": keelgate, "langgraph": langgraph, "dbos": dbos_case, "floor": bare}
        if not quick():
            cases["keelgate_per_asyncio_run"] = keelgate_as_worker
        for case in cases.values():
            case()
        values = interleave(BENCH, cases, rounds=rounds, between=_pg.maintain)
    finally:
        runner.close()
        dbos.close()
        floor.close()
        manager.__exit__(None, None, None)
        connections.close_all()
    km, lm, dm, fm = (median(values[n]) for n in ("keelgate", "langgraph", "dbos", "floor"))
    rows = [
        Row(
            BENCH,
            "Keelgate (Django stores, fenced, as runs.engine.loops wires them)",
            "step",
            "us/step",
            km,
            values["keelgate"],
            extra={
                "batch": batch,
                "commits_per_step": counts["keelgate_commits"],
                "transactions_per_step": counts["keelgate_transactions_server"],
                "transactions_per_step_client": counts["keelgate_transactions_client"],
                "queries_per_step": counts["keelgate_queries"],
                "bytes_per_step": round(sizes["keelgate_bytes"]),
                "checkpoint_table_bytes_per_step": round(sizes["keelgate_checkpoint_bytes"]),
                "checkpoint_json_bytes_per_step": sizes["keelgate_json_bytes"],
                "checkpoint_row_bytes_per_step": sizes["keelgate_stored_json_bytes"],
                "vs_langgraph": km / lm,
                "vs_dbos": km / dm,
                "vs_floor": km / fm,
            },
        ),
        Row(
            BENCH,
            "LangGraph StateGraph + PostgresSaver, durability=sync",
            "step",
            "us/step",
            lm,
            values["langgraph"],
            ratio=km / lm,
            ratio_to="Keelgate / LangGraph",
            extra={
                "batch": batch,
                "commits_per_step": counts["langgraph_commits"],
                "bytes_per_step": round(sizes["langgraph_bytes"]),
                "transactions_per_step": counts["langgraph_transactions_server"],
            },
        ),
        Row(
            BENCH,
            "DBOS 3 workflow of five @DBOS.step (PostgreSQL system database, same server)",
            "step",
            "us/step",
            dm,
            values["dbos"],
            ratio=km / dm,
            ratio_to="Keelgate / DBOS",
            extra={"batch": batch},
        ),
        Row(
            BENCH,
            f"floor: {commits} x bare INSERT+COMMIT (psycopg, synchronous_commit=on)",
            "step",
            "us/step",
            fm,
            values["floor"],
            ratio=km / fm,
            ratio_to="Keelgate / floor",
            extra={"batch": batch, "commits_per_step": commits, "us_per_commit": fm / commits},
        ),
    ]
    if "keelgate_per_asyncio_run" in values:
        wm = median(values["keelgate_per_asyncio_run"])
        rows.append(
            Row(
                BENCH,
                "Keelgate, one asyncio.run per step (a new connection each: the worker before its Runner)",
                "step",
                "us/step",
                wm,
                values["keelgate_per_asyncio_run"],
                ratio=wm / km,
                ratio_to="vs one event loop",
                extra={"batch": batch},
            )
        )
    return rows
