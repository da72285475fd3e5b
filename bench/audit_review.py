"""Benchmark 10: the audit review page with 1,000,000 events in one tenant, on PostgreSQL.

Like bench 8, the baseline is the same page for a tenant whose log is short (100 events),
measured in the same rounds: each page is rendered through Django's test client (view,
template, response) for both tenants, and its SQL queries are counted. Issue 29 asks that
a filtered page run the same number of queries at 1M events as at 100; the times say what
each filter costs at that size, and which ones walk the log instead of an index.

The log (QUICK: 100,000 events) is written with ``COPY``: runs of ten events (requested,
started, planned, approval requested, decided, two calls, status, planned, stopped), one
second apart, actors ``worker`` and five people, twenty tools; then ``ANALYZE``. The
pages: the newest; by actor and kind; by run; a day's hour (``from``/``to``); a
``created:`` qualifier over a day; the Decisions view; a page deep in the log
(``before=`` half-way, with a filter); the free text over run ids (``q``, a run id's
tail); an hour at the start of the log; and ``GET /api/v1/audit/events`` with filters.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import Row, interleave, median, progress, quick

BENCH = "10. audit review page, 1M events"
FEW = 100
RUN_KINDS = (
    ("run.requested", "person"),
    ("run.started", "worker"),
    ("loop.planned", "worker"),
    ("approval.requested", "worker"),
    ("approval.decided", "person"),
    ("gateway.call", "worker"),
    ("gateway.call", "worker"),
    ("run.status", "worker"),
    ("loop.planned", "worker"),
    ("run.stopped", "worker"),
)
"""One run's ten events, in order, and who writes each."""
PEOPLE = ("alice", "bob", "carol", "dave", "erin")
TOOLS = tuple(f"tool_{i:02d}" for i in range(20))
START = datetime(2026, 1, 1, tzinfo=UTC)


def many() -> int:
    return 100_000 if quick() else 1_000_000


def run_id(tenant: str, i: int) -> str:
    """The run of the ``i``-th event (ten events a run)."""
    return f"{tenant}-r{i // len(RUN_KINDS):07d}"


def _fill(tenant: str, n: int) -> None:
    """``n`` sequenced events of ``tenant``, with COPY, and the tenant's head."""
    from django.db import connection

    from audit.models import ChainHead
    from keelgate.audit import GENESIS_HASH, format_at

    t = time.perf_counter()
    columns = "tenant_id, seq, at, actor, kind, body, run_id, tool, version, leaf_hash, prev_hash, hash"
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor: COPY
        with raw.copy(f"COPY audit_auditevent ({columns}) FROM STDIN") as copy:
            for i in range(n):
                kind, who = RUN_KINDS[i % len(RUN_KINDS)]
                actor = PEOPLE[(i // len(RUN_KINDS)) % len(PEOPLE)] if who == "person" else "worker"
                run = run_id(tenant, i)
                tool = (
                    TOOLS[(i // len(RUN_KINDS)) % len(TOOLS)]
                    if "approval" in kind or "gateway" in kind
                    else ""
                )
                body = {"run_id": run, **({"tool": tool} if tool else {})}
                if kind == "approval.decided":
                    body.update(decision="approve" if i % 7 else "deny", note="checked")
                at = format_at(START + timedelta(seconds=i))
                text = json.dumps(body, sort_keys=True, separators=(",", ":"))
                copy.write_row((tenant, i + 1, at, actor, kind, text, run, tool, 2, f"{i:064x}", "", ""))
                if i and i % 200_000 == 0:
                    progress(f"{BENCH}: {tenant}: {i:,} of {n:,} events written")
    ChainHead.objects.update_or_create(tenant_id=tenant, defaults={"seq": n, "hash": GENESIS_HASH})
    progress(f"{BENCH}: {tenant}: {n:,} events in {time.perf_counter() - t:.1f}s")


def _client(username: str, tenant: str) -> Any:
    from django.test import Client

    from bench.live import _user

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(_user(tenant, username))
    return client


def _api(username: str, tenant: str) -> Any:
    from django.test import Client

    from bench.live import _user
    from tenants.api_keys import api_key_create
    from tenants.models import Tenant

    user = _user(tenant, username)
    _, key = api_key_create(by="tester", tenant=Tenant.objects.get(slug=tenant), user=user, name="bench")
    return Client(HTTP_HOST="127.0.0.1", headers={"Authorization": f"Bearer {key}"})


def _page_ms(client: Any, url: str, pages: int) -> float:
    """Milliseconds per full page render (view, template, response), ``pages`` in a row."""
    t = time.perf_counter()
    for _ in range(pages):
        response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}")
    return (time.perf_counter() - t) * 1000 / pages


def _queries(client: Any, url: str) -> tuple[int, int]:
    """SQL queries of one page, and how many events it shows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    body = response.content.decode()
    if response["Content-Type"].startswith("application/json"):
        return len(captured.captured_queries), len(json.loads(body)["items"])
    return len(captured.captured_queries), len(re.findall(r'<tr id="ev-\d+"', body))


def _urls(tenant: str, n: int) -> dict[str, str]:
    """The measured pages of a tenant of ``n`` events, by case."""
    middle = n // 2
    minute = "%Y-%m-%dT%H:%M"
    late, end = (
        (START + timedelta(seconds=n - 3600)).strftime(minute),
        (START + timedelta(seconds=n)).strftime(minute),
    )
    first_hour = (START + timedelta(minutes=59)).strftime(minute)
    first_day = START.date().isoformat()
    return {
        "newest": f"/audit/{tenant}/",
        "actor+kind": f"/audit/{tenant}/?actor=bob&kind=approval.decided",
        "run": f"/audit/{tenant}/?run={run_id(tenant, middle)}",
        "last hour": f"/audit/{tenant}/?from={late}&to={end}",
        "created: a day": f"/audit/{tenant}/?q=created:{first_day}+actor:carol",
        "decisions": f"/audit/{tenant}/decisions/",
        "deep, filtered": f"/audit/{tenant}/?actor=worker&before={middle}",
        "q: run id text": f"/audit/{tenant}/?q={run_id(tenant, middle)[-6:]}",
        "first hour": f"/audit/{tenant}/?to={first_hour}&kind=gateway.call",
        "API filtered": "/api/v1/audit/events?actor=alice&kind=approval.decided&newest_first=true&limit=50",
    }


def run() -> list[Row]:
    from bench import _pg

    _pg.setup_django()
    n = many()
    progress(f"{BENCH}: writing {n:,} + {FEW} events")
    _fill("audit-many", n)
    _fill("audit-few", FEW)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_auditevent")
    pages = {"many": _client("bench-many", "audit-many"), "few": _client("bench-few", "audit-few")}
    apis = {"many": _api("bench-many", "audit-many"), "few": _api("bench-few", "audit-few")}
    urls = {"many": _urls("audit-many", n), "few": _urls("audit-few", FEW)}

    def case(size: str, name: str) -> Any:
        client = apis[size] if name.startswith("API") else pages[size]
        url = urls[size][name]
        return lambda: _page_ms(client, url, 3)

    cases = {f"{name} @{size}": case(size, name) for name in urls["many"] for size in ("few", "many")}
    for name, measure in cases.items():  # warm the caches (templates, query plans) before timing
        t = time.perf_counter()
        measure()
        progress(f"{BENCH}: warm {name}: {(time.perf_counter() - t) * 1000 / 3:.1f} ms a page")
    values = interleave(BENCH, cases, rounds=3 if quick() else 5, between=_pg.maintain)
    rows = []
    for name in urls["many"]:
        client_of = apis if name.startswith("API") else pages
        q_few = _queries(client_of["few"], urls["few"][name])
        q_many = _queries(client_of["many"], urls["many"][name])
        base, m = median(values[f"{name} @few"]), median(values[f"{name} @many"])
        rows.append(
            Row(
                BENCH,
                f"{name}, {n:,} events (against {FEW})",
                "page",
                "ms",
                m,
                values[f"{name} @many"],
                ratio=m / base,
                ratio_to=f"this page / the same page at {FEW} events",
                extra={"queries": q_many[0], "queries_at_few": q_few[0], "shown": q_many[1], "few_ms": base},
                note=f"{q_many[0]} queries ({q_few[0]} at {FEW}), {q_many[1]} shown; {base:.1f} ms at {FEW}",
            )
        )
    return rows


if __name__ == "__main__":  # python -m bench.audit_review: this benchmark alone, its table
    from bench import _pg
    from bench.__main__ import render

    try:
        print(render(run()))
    finally:
        _pg.teardown()
