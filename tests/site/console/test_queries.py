"""The inbox and the run page read the database a fixed number of times, however much they show."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.engine.stores import DjangoCheckpointStore
from runs.models import Checkpoint
from runs.selectors import run_state

from .conftest import write_hostile_run

pytestmark = pytest.mark.django_db(transaction=True)

INBOX_QUERIES = 12
"""Session and user, memberships, chain heads, a page and a total per section, the approvals
of the unknown outcomes shown (none shown: no query), the filter's choices, and the
recently decided (approvals and reconciles)."""
RUN_QUERIES = 10


def _count(client, url):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_inbox_query_count_does_not_grow_with_items(people, as_user, django_assert_max_num_queries):
    """One item or forty across two tenants: the same, small number of queries."""
    client = as_user("op")
    write_hostile_run(run_id="one")
    few = _count(client, "/")
    for i in range(40):
        write_hostile_run(run_id=f"many-{i}")
    with django_assert_max_num_queries(INBOX_QUERIES):
        response = client.get("/")
    assert response.content.decode().count('class="item approval') == 41
    assert _count(client, "/") == few


def test_the_run_page_query_count_does_not_grow_with_checkpoints(
    people, as_user, django_assert_max_num_queries
):
    """A run with one checkpoint or sixty: the same number of queries for its page."""
    client = as_user("op")
    write_hostile_run(run_id="long")
    few = _count(client, "/runs/t1/long/")
    store = DjangoCheckpointStore()
    state = run_state(__import__("runs.models", fromlist=["Run"]).Run.objects.get(run_id="long"))
    for _ in range(60):
        state.seq += 1
        store.save(state)
    assert Checkpoint.objects.filter(run_id="long").count() == 61
    with django_assert_max_num_queries(RUN_QUERIES):
        response = client.get("/runs/t1/long/")
    assert response.content.decode().count('class="checkpoint"') == 61
    assert _count(client, "/runs/t1/long/") == few
    with django_assert_max_num_queries(RUN_QUERIES):
        client.get("/runs/t1/long/status/?seq=1")
    with django_assert_max_num_queries(RUN_QUERIES):
        client.get("/runs/")


def test_the_inbox_at_ten_thousand_pending_runs_the_same_queries(people, as_user, django_assert_num_queries):
    """10,000 approvals waiting in one tenant: the page reads the database as often as with one
    (INBOX_QUERIES, less the approvals of unknown outcomes: none is shown)."""
    from datetime import UTC, datetime, timedelta

    from approvals.models import Approval

    now = datetime.now(UTC)
    Approval.objects.bulk_create(
        [
            Approval(
                tenant_id="t1",
                run_id=f"bulk-{i}",
                action_id="a1",
                agent="paper-trader",
                tool="place_order",
                arguments='{"symbol": "ACME"}',
                requested_at=now - timedelta(seconds=i),
                expires_at=now + timedelta(hours=1) if i % 3 == 0 else None,
            )
            for i in range(10_000)
        ],
        batch_size=2_000,
    )
    client = as_user("op")
    with django_assert_num_queries(INBOX_QUERIES - 1):
        body = client.get("/").content.decode()
    assert body.count('class="item approval') == 50 and "<strong>10000</strong> approvals waiting" in body


def test_the_inbox_reads_an_mcp_upstream_once_however_many_of_its_calls_wait(people, as_user):
    """Forty calls of one MCP upstream waiting: the page reads the upstream (its tools, for the
    cards' descriptions and edit forms) once, as it does for one call."""
    from datetime import UTC, datetime, timedelta

    from approvals.models import Approval
    from mcp_gateway.models import Upstream

    Upstream.objects.create(
        tenant_id="t1",
        name="mail",
        command="unused",
        tools=[
            {
                "name": "send",
                "description": "Send <b>mail</b>.",
                "inputSchema": {"type": "object", "properties": {"to": {"type": "string"}}},
            }
        ],
        policy={"tools": {"send": {"approval": True}}},
    )
    now = datetime.now(UTC)

    def waiting(first: int, count: int) -> None:
        Approval.objects.bulk_create(
            Approval(
                tenant_id="t1",
                run_id=f"mcp-{i}",
                action_id="a1",
                agent="mcp:mail",
                tool="mail__send",
                arguments=f'{{"to": "person-{i}"}}',
                requested_at=now - timedelta(seconds=i),
            )
            for i in range(first, first + count)
        )

    client = as_user("op")
    waiting(0, 1)
    one = _count(client, "/")
    waiting(1, 39)
    with CaptureQueriesContext(connection) as queries:
        body = client.get("/").content.decode()
    assert body.count('class="item approval') == 40
    assert body.count("Send &lt;b&gt;mail&lt;/b&gt;.") == 40  # the upstream's words, escaped, on each card
    assert len(queries) == one
    assert sum("mcp_gateway_upstream" in q["sql"] for q in queries.captured_queries) == 1
