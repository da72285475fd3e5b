"""CPU of the audit log's two halves on PostgreSQL: an append's columns, and the sequencer's work.

``python -m bench.audit_costs`` (a scratch database as bench 4 makes; Linux, the server on
this host). Not part of ``make bench``; figures on ``docs/performance.md#audit-append``.
Cases alternate in rotated rounds (``bench._common.interleave``), medians reported:

- an append's columns: ``audit.store.pending_event`` against its form before issue 29
  (``bench.audit_append_variants.pending_event_before``: the body encoded three times),
  CPU per event over 20,000 ``gateway.call`` bodies of a real step, each with its own
  run id (a UUID's hex, as the product's);
- sequencing: 6,000 pending events numbered in batches (``audit.tree.integrate_all``)
  with the ORM's bulk inserts (``audit.tree.write_batch``, what SQLite runs) against
  ``COPY`` (``audit.store_postgresql.write_batch``): CPU per event of this process and of
  its server backend (``/proc/<pid>/stat``), and wall time per event.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench import _pg
from bench._common import interleave, median, progress

PER_BATCH = 20_000
SEQUENCED = 6_000


def _backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    _pg.setup_django()
    from django.db import connection

    from audit import tree
    from audit.models import PendingEvent
    from audit.store import pending_event
    from audit.store_postgresql import announce, write_batch
    from bench.audit_append_variants import pending_event_before
    from bench.audit_chain import BODY

    at = datetime.now(UTC)
    bodies = [{**BODY, "run_id": uuid.uuid4().hex} for _ in range(PER_BATCH)]

    def columns(encode: Callable[..., object]) -> Callable[[], float]:
        def measure() -> float:
            started = time.process_time()
            for body in bodies:
                encode("bench", at, "agent:trader", "gateway.call", body)
            return (time.process_time() - started) / len(bodies) * 1e6

        return measure

    encoded = interleave(
        "pending_event, us CPU",
        {"before": columns(pending_event_before), "now": columns(pending_event)},
        rounds=7,
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    walls: dict[str, list[float]] = {"orm": [], "copy": []}
    servers: dict[str, list[float]] = {"orm": [], "copy": []}

    def sequencing(label: str, write: tree.WriteBatch) -> Callable[[], float]:
        def measure() -> float:
            now = datetime.now(UTC)
            PendingEvent.objects.bulk_create(
                [
                    PendingEvent(**pending_event("bench", now, "agent:trader", "gateway.call", body))
                    for body in bodies[:SEQUENCED]
                ],
                batch_size=2000,
            )
            server, started, wall = _backend_cpu(backend), time.process_time(), time.perf_counter()
            done = tree.integrate_all(["bench"], announce=announce, write=write)
            assert done == SEQUENCED, done
            walls[label].append((time.perf_counter() - wall) / done * 1e6)
            servers[label].append((_backend_cpu(backend) - server) / done * 1e6)
            return (time.process_time() - started) / done * 1e6

        return measure

    sequenced = interleave(
        "sequencing, us CPU an event",
        {"orm": sequencing("orm", tree.write_batch), "copy": sequencing("copy", write_batch)},
        rounds=5,
    )
    _pg.teardown()
    print(
        f"\npending_event, CPU per event: before {median(encoded['before']):.1f} us,"
        f" now {median(encoded['now']):.1f} us"
    )
    for label, name in (("orm", "the ORM's bulk inserts"), ("copy", "COPY")):
        print(
            f"sequencing with {name}: {median(sequenced[label]):.0f} us CPU an event here,"
            f" {median(servers[label]):.0f} us in the server backend, {median(walls[label]):.0f} us wall"
        )
    progress("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
