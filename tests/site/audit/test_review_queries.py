"""The review pages and the API read the database a fixed number of times, however long the log."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent, ChainHead
from tenants.models import Tenant
from tests.site._keys import key_row

from .review_log import spec, write_log

pytestmark = pytest.mark.django_db

PAGE_QUERIES = 9
"""Session and user, the memberships (the role, the tenants' links, Export), the nav's two
counts, the head, whether any event waits to be sequenced, a page of events and whether
there are any on its other side."""

URLS = [
    "/audit/t1/",
    "/audit/t1/?actor=alice&kind=approval.decided",
    "/audit/t1/?q=r-1+created:>=2026-12-01&tool=transfer",
    "/audit/t1/?actor=bob&before=60",
    "/audit/t1/?run=r-2&after=20",
    "/audit/t1/rows/?from=2026-12-02&to=2026-12-04",
    "/audit/t1/decisions/?run=r-3",
    "/audit/t1/decisions/?before=70",
    "/audit/t1/events/50/",
    "/audit/t1/checkpoints/",
]
API = [
    {"actor": "alice", "q": "r-1 created:>=2026-12-01"},
    {"decisions": "true", "newest_first": "true", "before_seq": 70},
    {"run": "r-4", "after_seq": 20, "limit": 10},
]


def counts(operator, n: int) -> tuple[list[int], list[int], list[int]]:
    """Queries of each page and API call over a log of ``n`` events, and how many rows each showed."""
    write_log("t1", [spec(seq) for seq in range(1, n + 1)])
    client = Client()
    client.force_login(operator)
    key = key_row(tenant=Tenant.objects.get(slug="t1"), user=operator, name=f"q{n}")
    api = Client(headers={"Authorization": f"Bearer {key}"})
    pages, shown, calls = [], [], []
    for url in URLS:
        client.get(url)  # warm what is cached per process (templates, the API's schema)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200, url
        pages.append(len(queries))
        shown.append(response.content.decode().count('<tr id="'))
    for params in API:
        api.get("/api/v1/audit/events", params)
        with CaptureQueriesContext(connection) as queries:
            response = api.get("/api/v1/audit/events", params)
        assert response.status_code == 200, params
        calls.append(len(queries))
    return pages, shown, calls


def test_a_filtered_page_runs_the_same_queries_at_100_events_as_at_5000(operator):
    """100 events or 5,000: each page and API call runs as many queries, at most PAGE_QUERIES."""
    few_pages, few_shown, few_calls = counts(operator, 100)
    AuditEvent.objects.all().delete()
    ChainHead.objects.all().delete()
    many_pages, many_shown, many_calls = counts(operator, 5000)
    assert few_pages == many_pages, list(zip(URLS, few_pages, many_pages, strict=True))
    assert few_calls == many_calls
    assert max(many_pages) <= PAGE_QUERIES, list(zip(URLS, many_pages, strict=True))
    assert all(many_shown[:8]), "each list page showed events"
    assert sum(many_shown) > sum(few_shown)
