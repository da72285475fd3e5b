"""4. The audit log on PostgreSQL: appends, commit to signed checkpoint, verification, proofs.

Issue 29's figures, each a ratio to a baseline measured in the same run.

4a. Appends: one tenant's ``PostgresAuditLog.record`` (what the loop, the gateway and
the services call) from 4 and then 16 writer processes started together, each record its
own transaction: with no caller's transaction (one autocommit ``INSERT``), and the same
through a commit group of its own (``runs.engine.loops.commit_group``: ``BEGIN``, the
``INSERT``, ``COMMIT`` in one message), as the loop writes when a record is all its
transaction holds. Against bare commits of a comparable row from as many processes (one
autocommit ``INSERT`` of the same columns and values into a table made ``LIKE
audit_pendingevent INCLUDING ALL``, so with the same indexes). A ``keelgate_sequencer``
runs in its own process throughout, at its defaults: numbering the events into the tree
and signing checkpoints is part of an append's cost, and it competes with the writers
for the same two cores. The rate is the writers' (events committed over the time from
the common start to the last commit); each row also gives what was still unnumbered when
the writers finished and how long the sequencer took to catch up. Each event's commit
time (wall clock, taken in its writer when ``record`` returns) is matched by its run id
to its number, and that to the first checkpoint covering it: the delay to that
checkpoint's ``signed_at`` (taken before the checkpoint's transaction commits, a few
milliseconds early), median and p99 over every round.

4b. Verification of one tenant of 1,000,000 events (QUICK 100,000), written straight
into the tables (``COPY``): events shaped like a real step's six (bench 1's step: run
started, planned, two gateway calls, planned, stopped, a run id per step), each leaf
made with the engine's own functions (``leaf_object``, ``leaf_bytes``, ``leaf_hash``),
every complete subtree from ``TreeBuilder`` (the nodes the sequencer stores), a signed
checkpoint every 1,000 events (what 2,000 appends/s and a checkpoint every 0.5 s leave),
and the head. Timed: the site's ``audit.verification.verify_log`` (the database read
included) and the offline ``keelgate.audit.verify_bundle`` over the whole log's bundle
(``audit.exports.export_bundle``, as JSON text: parsing it is part of an offline check);
against two floors over the very leaf bytes, held in memory: chained SHA-256
(``sha256(prev || bytes)``, the issue's baseline) and the Merkle floor (each leaf's
``SHA-256(0x00 || bytes)`` and every node's ``SHA-256(0x01 || left || right)``, with
``hashlib`` only), which is what a tree verifier cannot avoid. Both floors must give the
head's root or hash the bytes the verifiers hashed.

4c. Proofs: ``audit.proofs.inclusion`` and ``audit.proofs.consistency`` (what the API's
proof endpoints call) at a random leaf and a random first size, in the log of 4b
against a log of 1,000 events written the same way: milliseconds per proof and SQL
queries per proof.

``BENCH_AUDIT_PARTS`` (``append,verify,proofs``, the default all three) runs some parts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import _pg
from bench._common import REPO, Row, interleave, median, progress, quick, scratch
from bench._scenario import SqliteKeelgate, run_step

BENCH_APPEND = "4a. audit append, PostgreSQL"
BENCH_VERIFY = "4b. audit verification"
BENCH_PROOF = "4c. audit proofs"
TENANT = "bench"
APPEND_TENANT = "bench-append"
VERIFY_TENANT = "bench-verify"
SMALL_TENANT = "bench-1k"
SMALL = 1_000
CHECKPOINT_EVERY = 1_000
START = datetime(2026, 1, 1, tzinfo=UTC)


def _parts() -> set[str]:
    return {p.strip() for p in os.environ.get("BENCH_AUDIT_PARTS", "append,verify,proofs").split(",")}


def _template_events(root: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(actor, kind, body) of the six events one real step appends."""
    k = SqliteKeelgate(root, prewarm=False)
    try:
        result = asyncio.run(run_step(k.loop, run_id="0" * 32))
        events = list(k.audit.events(result.state.tenant_id))
    finally:
        k.close()
    return [(e.actor, e.kind, dict(e.body)) for e in events]


# -- 4a. appends ----------------------------------------------------------------------------

BODY = {
    "action_id": "1-2",
    "arguments_hash": "d8acf093a7bb72bf3a9bdb233e20c2ec55fb63267378daebc441a9cc229c42d1",
    "code": None,
    "idempotency_key": "kg_4044df878ab7fe471331e55e03896d03f0f59002",
    "replayed": False,
    "run_id": "0" * 32,
    "status": "done",
    "tool": "place_order",
}
"""A real step's ``gateway.call`` body (the WRITE's); each append gets its own run id."""

_FLOOR_TABLE = "bench_audit_floor"


def _run_id(writer: int, i: int) -> str:
    return f"w{writer:02d}-{i:07d}"


def _keelgate_writer(writer: int, n: int, ready: Any, go: Any, out: Any, grouped: bool = False) -> None:
    """One writer process: ``n`` ``record`` calls, each its own transaction (with no caller's
    transaction; through a commit group of its own with ``grouped``); commit times out."""
    from django.db import connection

    from audit.wiring import audit_log
    from runs.engine.loops import commit_group

    log = audit_log(group=commit_group() if grouped else None)
    log.record(APPEND_TENANT, actor="agent:trader", kind="gateway.call", body={**BODY, "run_id": "warm"})
    ready.release()
    go.wait()
    stamps: list[float] = []
    now = time.time
    for i in range(n):
        log.record(
            APPEND_TENANT,
            actor="agent:trader",
            kind="gateway.call",
            body={**BODY, "run_id": _run_id(writer, i)},
        )
        stamps.append(now())
    end = time.perf_counter()
    connection.close()
    out.put((writer, end, stamps))


def _grouped_writer(writer: int, n: int, ready: Any, go: Any, out: Any) -> None:
    """:func:`_keelgate_writer` through a commit group, as the loop writes."""
    _keelgate_writer(writer, n, ready, go, out, grouped=True)


def _floor_writer(writer: int, n: int, ready: Any, go: Any, out: Any) -> None:
    """One floor process: ``n`` autocommit INSERTs of the row an append inserts."""
    import psycopg

    from audit.store import pending_event

    columns = pending_event(APPEND_TENANT, datetime.now(UTC), "agent:trader", "gateway.call", BODY)
    names = ", ".join(columns)
    sql = f"INSERT INTO {_FLOOR_TABLE} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"
    values = tuple(columns.values())
    with psycopg.connect(_pg.BENCH_URL, autocommit=True) as conn:
        conn.execute(sql, values)
        ready.release()
        go.wait()
        for _ in range(n):
            conn.execute(sql, values)
        end = time.perf_counter()
    out.put((writer, end, []))


def _concurrent(target: Callable[..., None], writers: int, n: int) -> tuple[float, list[list[float]]]:
    """Events per second from ``writers`` forked processes, ``n`` each, from a common start;
    and each writer's commit times."""
    from django.db import connections

    connections.close_all()  # children must open their own
    ctx = mp.get_context("fork")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(w, n, ready, go, out)) for w in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=120):
            raise RuntimeError("a writer process did not start")
    start = time.perf_counter()
    go.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a writer process failed ({p.exitcode})")
    stamps = [s for _, _, s in sorted(results, key=lambda r: r[0])]
    return writers * n / (max(end for _, end, _ in results) - start), stamps


class Sequencer:
    """``manage.py keelgate_sequencer`` in its own process, at its defaults."""

    def __init__(self) -> None:
        self.log = _pg.scratch_dir() / "sequencer.log"
        self.out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "keelgate_sequencer"],
            cwd=REPO,
            env={**os.environ, **_pg.django_env()},
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )

    def cpu_seconds(self) -> float | None:
        """The process's CPU time so far (Linux), None where it cannot be read."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the sequencer exited: {self.log.read_text()[-800:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


def _caught_up(size: int, timeout: float = 60.0) -> tuple[float, float]:
    """Wait until the head reaches ``size`` and then a checkpoint covers it: the seconds
    each took from now."""
    from audit.models import ChainHead, Checkpoint

    t = time.perf_counter()
    numbered = None
    while True:
        head = ChainHead.objects.filter(tenant_id=APPEND_TENANT).values_list("seq", flat=True).first() or 0
        if numbered is None and head >= size:
            numbered = time.perf_counter() - t
        if (
            numbered is not None
            and Checkpoint.objects.filter(tenant_id=APPEND_TENANT, size__gte=size).exists()
        ):
            return numbered, time.perf_counter() - t
        if time.perf_counter() - t > timeout:
            raise RuntimeError(f"the sequencer did not reach {size} in {timeout:.0f}s (head {head})")
        time.sleep(0.01)


def _delays(after_seq: int, writers: int, stamps: list[list[float]]) -> list[float]:
    """Each event's seconds from its commit to the ``signed_at`` of the first checkpoint covering it."""
    import bisect

    from audit.models import AuditEvent, Checkpoint

    numbered = dict(
        AuditEvent.objects.filter(tenant_id=APPEND_TENANT, seq__gt=after_seq).values_list("run_id", "seq")
    )
    checkpoints = list(
        Checkpoint.objects.filter(tenant_id=APPEND_TENANT, size__gt=after_seq)
        .order_by("size")
        .values_list("size", "signed_at")
    )
    sizes = [size for size, _ in checkpoints]
    delays = []
    for writer in range(writers):
        for i, committed in enumerate(stamps[writer]):
            seq = numbered[_run_id(writer, i)]
            signed_at = checkpoints[bisect.bisect_left(sizes, seq)][1]
            delays.append(signed_at.timestamp() - committed)
    return delays


def _pending_now() -> int:
    from audit.models import PendingEvent

    return PendingEvent.objects.filter(tenant_id=APPEND_TENANT).count()


def _head() -> int:
    from audit.models import ChainHead

    return ChainHead.objects.filter(tenant_id=APPEND_TENANT).values_list("seq", flat=True).first() or 0


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def run_append() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH_APPEND, f"not measured: {why}", "", "", None)]
    _pg.setup_django()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {_FLOOR_TABLE} (LIKE audit_pendingevent INCLUDING ALL)")
    rounds = 3 if quick() else 5
    per = {4: 100, 16: 25} if quick() else {4: 500, 16: 125}
    sequencer = Sequencer()
    _pg.on_teardown(sequencer.stop)
    forms = {"record": _keelgate_writer, "grouped": _grouped_writer}
    delays: dict[str, list[float]] = {}
    extra: dict[str, dict[str, list[float]]] = {}

    def keelgate(form: str, writers: int) -> Callable[[], float]:
        label = f"{form} {writers}"
        delays[label], extra[label] = [], {"backlog": [], "numbered_s": [], "cpu_us": []}

        def case() -> float:
            sequencer.check()
            before = _head() + _pending_now()
            cpu = sequencer.cpu_seconds()
            rate, stamps = _concurrent(forms[form], writers, per[writers])
            backlog = _pending_now()
            numbered_s, _ = _caught_up(before + writers * (per[writers] + 1))  # and each writer's warm-up
            delays[label].extend(_delays(before, writers, stamps))
            extra[label]["backlog"].append(backlog)
            extra[label]["numbered_s"].append(numbered_s)
            after = sequencer.cpu_seconds()
            if cpu is not None and after is not None:  # its polls while the floor ran are not counted
                extra[label]["cpu_us"].append((after - cpu) / (writers * (per[writers] + 1)) * 1e6)
            return rate

        return case

    def floor(writers: int) -> Callable[[], float]:
        return lambda: _concurrent(_floor_writer, writers, per[writers])[0]

    cases = {}
    for w in per:
        cases[f"record {w}"] = keelgate("record", w)
        cases[f"grouped {w}"] = keelgate("grouped", w)
        cases[f"floor {w}"] = floor(w)
    progress(f"{BENCH_APPEND}: a keelgate_sequencer process runs throughout (pid {sequencer.proc.pid})")
    for measure in cases.values():  # warm up: connections, the sequencer's first passes, the pages
        measure()
    for label in delays:
        delays[label].clear()
        extra[label] = {"backlog": [], "numbered_s": [], "cpu_us": []}
    values = interleave(BENCH_APPEND, cases, rounds=rounds, between=_pg.maintain)
    sequencer.stop()
    rows = []
    systems = {
        "record": "Keelgate: PostgresAuditLog.record, its own transaction (one autocommit INSERT)",
        "grouped": "Keelgate: the same through a commit group, as the loop writes (BEGIN, INSERT, COMMIT)",
    }
    for w in per:
        fm = median(values[f"floor {w}"])
        for form, system in systems.items():
            label = f"{form} {w}"
            km, d, more = median(values[label]), delays[label], extra[label]
            rows.append(
                Row(
                    BENCH_APPEND,
                    f"{system}, {w} writers",
                    "append",
                    "appends/s",
                    km,
                    values[label],
                    ratio=fm / km,
                    ratio_to="its time / the floor's",
                    extra={
                        "writers": w,
                        "form": form,
                        "per_writer": per[w],
                        "backlog_at_end": median(more["backlog"]),
                        "numbered_within_s": median(more["numbered_s"]),
                        "p99_ms": _percentile(d, 0.99) * 1000,
                        "p50_ms": _percentile(d, 0.5) * 1000,
                        "sequencer_cpu_us": median(more["cpu_us"]) if more["cpu_us"] else None,
                    },
                    note=(
                        f"commit → signed checkpoint p99 {_percentile(d, 0.99) * 1000:.0f} ms"
                        f" (median {_percentile(d, 0.5) * 1000:.0f}, max {max(d) * 1000:.0f}) over"
                        f" {len(d):,} events; at the writers' end {median(more['backlog']):.0f}"
                        f" unnumbered, all numbered {median(more['numbered_s']):.2f} s later;"
                        f" the sequencer's CPU {median(more['cpu_us']) if more['cpu_us'] else 0:.0f} us"
                        " an event (its process, not its server backend)"
                    ),
                )
            )
        rows.append(
            Row(
                BENCH_APPEND,
                f"floor: bare autocommit INSERT of the same row, {w} processes",
                "append",
                "commits/s",
                fm,
                values[f"floor {w}"],
                extra={"writers": w},
            )
        )
        d = delays[f"record {w}"]
        rows.append(
            Row(
                BENCH_APPEND,
                f"commit → signed checkpoint, record, {w} writers, p99 over {len(d):,} events",
                "delay",
                "ms",
                _percentile(d, 0.99) * 1000,
                extra={"writers": w, "p50_ms": _percentile(d, 0.5) * 1000, "max_ms": max(d) * 1000},
            )
        )
    return rows


# -- 4b. a log of 1,000,000 events -----------------------------------------------------------


def fill_log(tenant: str, n: int, templates: list[tuple[str, str, dict[str, Any]]]) -> list[bytes]:
    """``n`` sequenced events of ``tenant`` written straight into the tables; their leaf bytes.

    The events, their leaves (the engine's ``leaf_object``, ``leaf_bytes``, ``leaf_hash``),
    every complete subtree (``TreeBuilder``, what the sequencer stores), a checkpoint every
    :data:`CHECKPOINT_EVERY` events and at ``n`` (signed with the site's key), the head.
    """
    from django.db import connection
    from django.utils import timezone

    from audit.checkpoints import log_origin
    from audit.digest import signing_key
    from audit.models import ChainHead, Checkpoint
    from keelgate.audit import (
        GENESIS_HASH,
        TreeBuilder,
        format_at,
        format_checkpoint,
        leaf_bytes,
        leaf_hash,
        leaf_object,
        sign_note,
    )
    from keelgate.audit import Checkpoint as CheckpointBody
    from keelgate.canonical import canonical_json

    t = time.perf_counter()
    builder = TreeBuilder()
    blobs: list[bytes] = []
    nodes: list[tuple[str, int, int, bytes]] = []
    roots: dict[int, bytes] = {}
    columns = "tenant_id, seq, at, actor, kind, body, run_id, tool, version, leaf_hash, prev_hash, hash"
    per_step = len(templates)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY audit_auditevent ({columns}) FROM STDIN") as copy:
            for i in range(n):
                actor, kind, template = templates[i % per_step]
                run_id = f"{i // per_step:032x}"
                body = {**template, "run_id": run_id}
                seq = i + 1
                at = format_at(START + timedelta(microseconds=1000 * i))
                text = canonical_json(body)
                leaf = leaf_object(
                    version=2, tenant_id=tenant, seq=seq, at=at, actor=actor, kind=kind, body=body
                )
                data = leaf_bytes(leaf)
                blobs.append(data)
                lh = leaf_hash(data)
                for level, index, h in builder.add(lh):
                    nodes.append((tenant, level, index, h))
                if seq % CHECKPOINT_EVERY == 0 or seq == n:
                    roots[seq] = builder.root()
                tool = body.get("tool", "")
                copy.write_row((tenant, seq, at, actor, kind, text, run_id, tool, 2, lh.hex(), "", ""))
                if seq % 200_000 == 0:
                    progress(f"{BENCH_VERIFY}: {tenant}: {seq:,} of {n:,} events written")
        with cursor.cursor.copy("COPY audit_treenode (tenant_id, level, index, hash) FROM STDIN") as copy:
            for row in nodes:
                copy.write_row(row)
    origin, key, now = log_origin(tenant), signing_key(), timezone.now()
    Checkpoint.objects.bulk_create(
        [
            Checkpoint(
                tenant_id=tenant,
                size=size,
                root=root.hex(),
                note=sign_note(format_checkpoint(CheckpointBody(origin, size, root)), origin, key),
                signed_at=now,
            )
            for size, root in roots.items()
        ],
        batch_size=1000,
    )
    ChainHead.objects.update_or_create(
        tenant_id=tenant, defaults={"seq": n, "hash": GENESIS_HASH, "chain_seq": 0, "root": roots[n].hex()}
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_auditevent")
        cursor.execute("ANALYZE audit_treenode")
        cursor.execute("ANALYZE audit_checkpoint")
    progress(
        f"{BENCH_VERIFY}: {tenant}: {n:,} events, {len(nodes):,} tree nodes, {len(roots):,} checkpoints "
        f"in {time.perf_counter() - t:.1f}s ({sum(map(len, blobs)) / n:.0f} leaf bytes per event)"
    )
    return blobs


def chained_floor(blobs: list[bytes]) -> bytes:
    """The issue's baseline: ``sha256(prev || bytes)`` chained over every event's bytes."""
    sha256 = hashlib.sha256
    prev = b"\x00" * 32
    for blob in blobs:
        digest = sha256(prev)
        digest.update(blob)
        prev = digest.digest()
    return prev


def merkle_floor(blobs: list[bytes]) -> bytes:
    """What a tree verifier cannot avoid: every leaf hash and every node hash, hashlib only."""
    sha256 = hashlib.sha256
    edge: list[tuple[int, bytes]] = []
    for blob in blobs:
        digest = sha256(b"\x00")
        digest.update(blob)
        h, level = digest.digest(), 0
        while edge and edge[-1][0] == level:
            h = sha256(b"\x01" + edge.pop()[1] + h).digest()
            level += 1
        edge.append((level, h))
    root = edge[-1][1]
    for _, left in reversed(edge[:-1]):
        root = sha256(b"\x01" + left + root).digest()
    return root


def run_verify(blobs: list[bytes], root: bytes) -> list[Row]:
    from audit.checkpoints import log_verifier_key
    from audit.exports import export_bundle
    from audit.verification import verify_log
    from keelgate.audit import verify_bundle

    n = len(blobs)
    rounds = 2 if quick() else 3
    t = time.perf_counter()
    bundle = json.dumps(export_bundle(VERIFY_TENANT), separators=(",", ":"), ensure_ascii=False)
    progress(
        f"{BENCH_VERIFY}: the bundle of {n:,} events, {len(bundle) / 1e6:.0f} MB,"
        f" in {time.perf_counter() - t:.1f}s"
    )
    key = log_verifier_key(VERIFY_TENANT)

    def site() -> float:
        t = time.perf_counter()
        report = verify_log(tenant_id=VERIFY_TENANT)
        elapsed = time.perf_counter() - t
        if not report.ok or report.checked != n or report.head_hash != root.hex():
            raise RuntimeError(f"verify_log failed: {report}")
        return n / elapsed

    def offline() -> float:
        t = time.perf_counter()
        report = verify_bundle(bundle, vkey=key)
        elapsed = time.perf_counter() - t
        if report.events != n or report.root != root:
            raise RuntimeError(f"verify_bundle checked something else: {report}")
        return n / elapsed

    def chained() -> float:
        t = time.perf_counter()
        chained_floor(blobs)
        return n / (time.perf_counter() - t)

    def merkle() -> float:
        t = time.perf_counter()
        got = merkle_floor(blobs)
        elapsed = time.perf_counter() - t
        if got != root:
            raise RuntimeError("the Merkle floor hashed other bytes than the log holds")
        return n / elapsed

    values = interleave(
        BENCH_VERIFY,
        {"verify_log": site, "verify_bundle": offline, "chained": chained, "merkle": merkle},
        rounds=rounds,
    )
    m = {name: median(v) for name, v in values.items()}
    rows = []
    for name, system in (
        ("verify_log", f"Keelgate: audit.verification.verify_log, PostgreSQL, {n:,} events"),
        ("verify_bundle", f"Keelgate: keelgate.audit.verify_bundle, the {n:,}-event bundle as JSON text"),
    ):
        rows.append(
            Row(
                BENCH_VERIFY,
                system,
                "verify",
                "events/s",
                m[name],
                values[name],
                ratio=m["chained"] / m[name],
                ratio_to="its time / chained SHA-256's",
                extra={"events": n, "vs_merkle_floor": m["merkle"] / m[name]},
                note=f"{m['merkle'] / m[name]:.2f}x the Merkle floor's time",
            )
        )
    rows.append(
        Row(
            BENCH_VERIFY,
            "floor: chained SHA-256 over the same leaf bytes, in memory",
            "verify",
            "events/s",
            m["chained"],
            values["chained"],
            extra={"events": n},
        )
    )
    rows.append(
        Row(
            BENCH_VERIFY,
            "floor: Merkle leaf and node hashes (hashlib) over the same bytes, in memory",
            "verify",
            "events/s",
            m["merkle"],
            values["merkle"],
            ratio=m["chained"] / m["merkle"],
            ratio_to="its time / chained SHA-256's",
            extra={"events": n},
        )
    )
    return rows


# -- 4c. proofs -----------------------------------------------------------------------------


def run_proofs(n: int) -> list[Row]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from audit.models import ChainHead
    from audit.proofs import consistency, inclusion
    from keelgate.audit import check_consistency, check_inclusion

    sizes = {"large": (VERIFY_TENANT, n), "small": (SMALL_TENANT, SMALL)}
    per_batch = 100
    rng = random.Random(29)

    def roots(tenant: str) -> bytes:
        return bytes.fromhex(ChainHead.objects.get(tenant_id=tenant).root)

    def check(size: str) -> dict[str, int]:
        """One proof of each kind, checked against the head's root; the queries each ran."""
        from audit.models import AuditEvent
        from audit.tree import event_leaf
        from keelgate.audit import object_leaf_hash

        tenant, total = sizes[size]
        root, seq = roots(tenant), total // 3
        with CaptureQueriesContext(connection) as by_inclusion:
            proof = inclusion(tenant, seq=seq)
        leaf = object_leaf_hash(event_leaf(AuditEvent.objects.get(tenant_id=tenant, seq=seq)))
        check_inclusion(seq - 1, total, leaf, proof.hashes, root)
        with CaptureQueriesContext(connection) as by_consistency:
            cons = consistency(tenant, first=seq)
        check_consistency(seq, total, _root_at(tenant, seq), root, cons.hashes)
        return {
            "inclusion": len(by_inclusion.captured_queries),
            "consistency": len(by_consistency.captured_queries),
        }

    queries = {size: check(size) for size in sizes}

    def case(kind: str, size: str) -> Callable[[], float]:
        tenant, total = sizes[size]

        def measure() -> float:
            picks = [rng.randint(1, total) for _ in range(per_batch)]
            t = time.perf_counter()
            for pick in picks:
                if kind == "inclusion":
                    inclusion(tenant, seq=pick)
                else:
                    consistency(tenant, first=pick)
            return (time.perf_counter() - t) * 1000 / per_batch

        return measure

    cases = {f"{kind} {size}": case(kind, size) for kind in ("inclusion", "consistency") for size in sizes}
    for measure in cases.values():
        measure()
    values = interleave(BENCH_PROOF, cases, rounds=3 if quick() else 5)
    rows = []
    for kind in ("inclusion", "consistency"):
        large, small = median(values[f"{kind} large"]), median(values[f"{kind} small"])
        ql, qs = queries["large"][kind], queries["small"][kind]
        rows.append(
            Row(
                BENCH_PROOF,
                f"Keelgate: audit.proofs.{kind}, {n:,} events",
                "proof",
                "ms",
                large,
                values[f"{kind} large"],
                ratio=large / small,
                ratio_to=f"its time / at {SMALL:,} events",
                extra={"queries": ql, "queries_small": qs},
                note=f"{ql} queries at {n:,} events, {qs} at {SMALL:,}",
            )
        )
        rows.append(
            Row(
                BENCH_PROOF,
                f"the same, {SMALL:,} events",
                "proof",
                "ms",
                small,
                values[f"{kind} small"],
                extra={"queries": qs},
            )
        )
    return rows


def _root_at(tenant: str, size: int) -> bytes:
    from audit.tree import node_reader
    from keelgate.audit import tree_root

    return tree_root(size, node_reader(tenant))


def run_log() -> list[Row]:
    why = _pg.reachable()
    if why:
        return [Row(BENCH_VERIFY, f"not measured: {why}", "", "", None)]
    _pg.setup_django()
    n = 100_000 if quick() else 1_000_000
    with scratch("audit-templates") as root:
        templates = _template_events(root)
    blobs = fill_log(VERIFY_TENANT, n, templates)
    fill_log(SMALL_TENANT, SMALL, templates)
    from audit.models import ChainHead

    head_root = bytes.fromhex(ChainHead.objects.get(tenant_id=VERIFY_TENANT).root)
    rows: list[Row] = []
    if "verify" in _parts():
        rows.extend(run_verify(blobs, head_root))
    del blobs
    if "proofs" in _parts():
        rows.extend(run_proofs(n))
    return rows


def run() -> list[Row]:
    rows: list[Row] = []
    parts = _parts()
    chosen = [(BENCH_APPEND, run_append)] if "append" in parts else []
    if parts & {"verify", "proofs"}:
        chosen.append((BENCH_VERIFY, run_log))
    for bench, measure in chosen:
        try:
            rows.extend(measure())
        except Exception as exc:  # one part that breaks is a row, not the others lost
            traceback.print_exc()
            rows.append(Row(bench, f"not measured: {type(exc).__name__}: {exc}", "", "", None))
    return rows
