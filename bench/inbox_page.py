"""Benchmark 8: the inbox page with 10,000 pending approvals in one tenant, on PostgreSQL.

The baseline is the same page for a tenant with 50 pending approvals (one full page, the
same number of cards), measured in the same rounds: the ratio says what 200 times more
waiting work costs the person who opens the inbox (a keyset page and two aggregates, so
it should stay near 1). A deep
page (the oldest items, through the keyset cursor) and a filtered view are measured
too, with the SQL queries of each page.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import Row, interleave, median, progress, quick

BENCH = "8. inbox page, 10,000 pending"
MANY = 10_000
FEW = 50
"""One full page: the baseline renders as many cards as the 10,000 page does."""


def _fill(tenant: str, n: int) -> None:
    """``n`` pending approvals shaped like the demo's (arguments, goal, impact), some with deadlines."""
    from approvals.models import Approval

    now = datetime.now(UTC)
    rows = [
        Approval(
            tenant_id=tenant,
            run_id=f"{tenant}-run-{i:05d}",
            action_id="a1",
            agent="paper-trader",
            tool="place_order" if i % 5 else "cancel_order",
            arguments=json.dumps({"symbol": "ACME", "side": "buy", "quantity": 1 + i % 40}),
            arguments_hash=f"{i:064d}",
            reason="Orders move money: a person must approve.",
            goal=f"buy {1 + i % 40} ACME",
            impact=f"Buys {1 + i % 40} ACME at market.",
            requested_at=now - timedelta(seconds=n - i),
            expires_at=now + timedelta(hours=1 + i % 7) if i % 3 == 0 else None,
            high_impact=i % 11 == 0,
        )
        for i in range(n)
    ]
    Approval.objects.bulk_create(rows, batch_size=2000)


def _client(username: str, tenant: str) -> Any:
    from django.test import Client

    from bench.live import _user

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(_user(tenant, username))
    return client


def _page_ms(client: Any, url: str, pages: int) -> float:
    """Milliseconds per full page render (view, template, response), ``pages`` in a row."""
    t = time.perf_counter()
    for _ in range(pages):
        response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}")
    return (time.perf_counter() - t) * 1000 / pages


def _queries(client: Any, url: str) -> tuple[int, int]:
    """SQL queries of one page, and how many cards it shows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        body = client.get(url).content.decode()
    return len(captured.captured_queries), len(re.findall(r'id="item-a-\d+"', body))


def _deep_url(client: Any, hops: int) -> str:
    """The URL of the page ``hops`` "Next" links in (the keyset cursor of the oldest stretch)."""
    url = "/"
    for _ in range(hops):
        body = client.get(url).content.decode()
        found = re.search(r'href="\?([^"]*)" rel="next">Next \d+ approvals', body)
        if found is None:
            break
        url = "/?" + found.group(1).replace("&amp;", "&")
    return url


def run() -> list[Row]:
    from bench import _pg

    _pg.setup_django()
    progress(f"{BENCH}: writing {MANY:,} + {FEW} pending approvals")
    _fill("inbox-many", MANY)
    _fill("inbox-few", FEW)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_approval")
    many, few = _client("bench-many", "inbox-many"), _client("bench-few", "inbox-few")
    deep = _deep_url(many, 40 if quick() else 150)
    cases = {
        "many": lambda: _page_ms(many, "/", 5),
        "few": lambda: _page_ms(few, "/", 5),
        "deep": lambda: _page_ms(many, deep, 5),
        "filtered": lambda: _page_ms(many, "/?tool=cancel_order&high_impact=1", 5),
    }
    for case in cases.values():  # warm the caches (templates, query plans) before timing
        case()
    values = interleave(BENCH, cases, rounds=5 if quick() else 15, between=_pg.maintain)
    q_many, q_few, q_deep, q_filtered = (
        _queries(many, "/"),
        _queries(few, "/"),
        _queries(many, deep),
        _queries(many, "/?tool=cancel_order&high_impact=1"),
    )
    base = median(values["few"])
    rows = [
        Row(
            BENCH,
            f"inbox, {FEW} pending (baseline)",
            "page",
            "ms",
            base,
            values["few"],
            extra={"queries": q_few[0], "cards": q_few[1]},
            note=f"{q_few[0]} queries, {q_few[1]} cards",
        ),
    ]
    for key, label, found in (
        ("many", f"inbox, {MANY:,} pending, first page", q_many),
        (
            "deep",
            f"inbox, {MANY:,} pending, a page deep in the keyset ({deep.count('after=')} cursor)",
            q_deep,
        ),
        ("filtered", f"inbox, {MANY:,} pending, filtered (tool + high impact)", q_filtered),
    ):
        m = median(values[key])
        rows.append(
            Row(
                BENCH,
                label,
                "page",
                "ms",
                m,
                values[key],
                ratio=m / base,
                ratio_to=f"this page / the {FEW}-pending page",
                extra={"queries": found[0], "cards": found[1]},
                note=f"{found[0]} queries, {found[1]} cards",
            )
        )
    return rows
