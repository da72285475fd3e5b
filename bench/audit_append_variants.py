"""The audit append's variants side by side: what each of issue 29's changes to it bought.

``python -m bench.audit_append_variants [--writers 4,16] [--rounds 5] [--per 2000] [--forms A;B]``, on
PostgreSQL (``BENCH_PG_URL``, a scratch database as bench 4 makes). Not part of ``make
bench``; figures on ``docs/performance.md#audit-append``.

Bench 4a's setting (one tenant, writer processes started together, a
``keelgate_sequencer`` process running throughout, bare autocommit ``INSERT``s of the
same row as the floor), with the writer's append in each of its forms, rotated in the
same rounds so that the machine's load falls on all of them alike:

- ``group, notify, 3 encodes``: the append before issue 29's changes to it, rebuilt
  here, as the loop and the services call it (through a commit group: ``BEGIN``, the
  ``INSERT``, ``COMMIT`` in one message): the body encoded three times
  (:func:`pending_event_before`), the ``INSERT`` ``RETURNING pg_notify(...)``;
- ``group, notify``: the same with the body encoded once (``audit.store.pending_event``);
- ``group (record now)``: ``PostgresAuditLog.record`` as it is now, through a commit group
  (bench 4a's second writer): no ``pg_notify``;
- ``atomic, notify, 3 encodes``: the append before, called with no transaction: it made
  its own (``BEGIN``, ``INSERT``, ``COMMIT``, three round trips);
- ``atomic, notify`` and ``atomic``: the same with the body encoded once, then without
  ``pg_notify``;
- ``autocommit (record now)``: ``PostgresAuditLog.record`` as it is now when there is no
  transaction (bench 4a's first writer): one autocommit ``INSERT``;
- ``autocommit, notify after``: the same, then ``pg_notify`` in a statement of its own (a
  wake-up tried and not kept: a notifying transaction that wrote nothing waits for no
  flush, but it is a round trip more).

The sequencer is the tree's own: run it from a tree before a change to see that change's
share of the sequencer's work (bench 4a prints its CPU per event).

Each row gives the appends' rate over the floor's (the floor's time over theirs: bench
4a's ratio) and the p99 delay from commit to a signed checkpoint covering the event.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from bench import _pg
from bench._common import interleave, median, progress
from bench.audit_chain import (
    _FLOOR_TABLE,
    APPEND_TENANT,
    BODY,
    Sequencer,
    _caught_up,
    _concurrent,
    _delays,
    _floor_writer,
    _grouped_writer,
    _head,
    _keelgate_writer,
    _pending_now,
    _percentile,
    _run_id,
)


def pending_event_before(
    tenant_id: str, at: datetime, actor: str, kind: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """``audit.store.pending_event`` before issue 29's change: the body encoded, encoded
    again through ``i_json`` as a check, then written as leaf bytes as a check."""
    from keelgate.audit import encode_body, format_at, i_json, leaf_bytes

    text, value = encode_body(body)
    if text != (safe := encode_body(i_json(value)))[0]:
        text, value = safe
    leaf_bytes({"body": value})
    run_id, tool = value.get("run_id"), value.get("tool")
    return {
        "tenant_id": tenant_id,
        "at": format_at(at.astimezone(UTC)),
        "actor": actor,
        "kind": kind,
        "body": text,
        "run_id": run_id[:128] if isinstance(run_id, str) else "",
        "tool": tool[:200] if isinstance(tool, str) else "",
    }


_COLUMNS = ("tenant_id", "at", "actor", "kind", "body", "run_id", "tool")
_INSERT = (
    f"INSERT INTO audit_pendingevent ({', '.join(_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_COLUMNS))})"
)
_NOTIFY = " RETURNING pg_notify(%s, %s)"
PENDING_CHANNEL = "keelgate_audit_pending"
"""The channel the append notified before issue 29's change (nobody listens now)."""


def _variant_writer(
    encode: Callable[..., dict[str, Any]], *, notify: bool = False, mode: str = "group", after: bool = False
) -> Callable[..., None]:
    """A writer process whose append is ``encode`` and one INSERT (``RETURNING pg_notify``
    with ``notify``): through a commit group of its own, each append its own transaction
    (``mode`` ``"group"``, as the loop writes), in a Django transaction of its own
    (``"atomic"``), or as one autocommit statement (``"autocommit"``); with ``after``, a
    ``pg_notify`` in an autocommit statement of its own once the INSERT committed."""
    group: Any = None

    def append(i: int, writer: int) -> None:
        from django.db import connection, transaction

        nonlocal group
        run_id = "warm" if i < 0 else _run_id(writer, i)
        columns = encode(
            APPEND_TENANT, datetime.now(UTC), "agent:trader", "gateway.call", {**BODY, "run_id": run_id}
        )
        params = [columns[c] for c in _COLUMNS]
        sql, values = (
            (_INSERT + _NOTIFY, [*params, PENDING_CHANNEL, APPEND_TENANT]) if notify else (_INSERT, params)
        )
        if mode == "group":
            if group is None:
                from runs.engine.loops import commit_group

                group = commit_group()
            with group.write():
                group.send(sql, values)
        elif mode == "atomic":
            with transaction.atomic(savepoint=False), connection.cursor() as cursor:
                cursor.execute(sql, values)
        else:
            with connection.cursor() as cursor:
                cursor.execute(sql, values)
        if after:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [PENDING_CHANNEL, APPEND_TENANT])

    def writer(w: int, n: int, ready: Any, go: Any, out: Any) -> None:
        import time

        from django.db import connection

        append(-1, w)
        ready.release()
        go.wait()
        stamps: list[float] = []
        for i in range(n):
            append(i, w)
            stamps.append(time.time())
        end = time.perf_counter()
        connection.close()
        out.put((w, end, stamps))

    return writer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit_append_variants", description=__doc__)
    parser.add_argument("--writers", default="4,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--forms", default="", help="forms separated by ; (default: all)")
    parser.add_argument("--per", type=int, default=2000, help="appends per round, shared by the writers")
    args = parser.parse_args(argv)
    _pg.setup_django()
    from audit.store import pending_event

    writers_of = [int(w) for w in args.writers.split(",")]
    forms: dict[str, Callable[..., None]] = {
        "group, notify, 3 encodes": _variant_writer(pending_event_before, notify=True),
        "group, notify": _variant_writer(pending_event, notify=True),
        "group (record now)": _grouped_writer,
        "atomic, notify, 3 encodes": _variant_writer(pending_event_before, notify=True, mode="atomic"),
        "atomic, notify": _variant_writer(pending_event, notify=True, mode="atomic"),
        "atomic": _variant_writer(pending_event, mode="atomic"),
        "autocommit (record now)": _keelgate_writer,
        "autocommit, notify after": _variant_writer(pending_event, mode="autocommit", after=True),
    }
    if args.forms:
        forms = {name: forms[name] for name in args.forms.split(";")}
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {_FLOOR_TABLE} (LIKE audit_pendingevent INCLUDING ALL)")
    sequencer = Sequencer()
    delays: dict[str, list[float]] = {}

    def appends(form: str, writers: int) -> Callable[[], float]:
        per = args.per // writers
        label = f"{form} @{writers}"
        delays[label] = []

        def case() -> float:
            sequencer.check()
            before = _head() + _pending_now()
            rate, stamps = _concurrent(forms[form], writers, per)
            _caught_up(before + writers * (per + 1))  # and each writer's warm-up
            delays[label].extend(_delays(before, writers, stamps))
            return rate

        return case

    def floor(writers: int) -> Callable[[], float]:
        return lambda: _concurrent(_floor_writer, writers, args.per // writers)[0]

    cases: dict[str, Callable[[], float]] = {}
    for writers in writers_of:
        cases[f"floor @{writers}"] = floor(writers)
        for form in forms:
            cases[f"{form} @{writers}"] = appends(form, writers)
    try:
        for measure in cases.values():  # warm up
            measure()
        for values in delays.values():
            values.clear()
        result = interleave("append variants", cases, rounds=args.rounds, between=_pg.maintain)
    finally:
        sequencer.stop()
        _pg.teardown()
    print(f"\n{'variant':<34} {'appends/s':>10} {'x floor':>8} {'p99 ms':>7} {'p50 ms':>7}  per round")
    for writers in writers_of:
        floor_rate = median(result[f"floor @{writers}"])
        rounds = ", ".join(f"{v:.0f}" for v in result[f"floor @{writers}"])
        print(f"{f'floor @{writers}':<34} {floor_rate:>10.0f} {'':>8} {'':>7} {'':>7}  {rounds}")
        for form in forms:
            label = f"{form} @{writers}"
            rate = median(result[label])
            d = delays[label]
            ratios = [f / a for f, a in zip(result[f"floor @{writers}"], result[label], strict=True)]
            rounds = ", ".join(f"{v:.0f}" for v in result[label])
            print(
                f"{label:<34} {rate:>10.0f} {floor_rate / rate:>7.2f}x {_percentile(d, 0.99) * 1000:>7.0f}"
                f" {_percentile(d, 0.5) * 1000:>7.0f}  {rounds} (per-round ratio median"
                f" {statistics.median(ratios):.2f}x)"
            )
    progress("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
