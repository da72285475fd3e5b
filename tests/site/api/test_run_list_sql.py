"""The API's run list is read by a statement written by hand (``sitekit.keyset_sql``, through
``run_rows_page``): page for page, cursor for cursor, it must give what the ORM queryset of
``runs_for`` gives, paged by the same listing.

Runs of two tenants, several statuses, agents and stop reasons, and groups of runs
created at the very same instant (the cursor's tie on ``created_at`` is broken by id).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Run, RunStatus
from runs.schemas import RUN_OUT_COLUMNS
from runs.selectors import RUN_LIST, run_rows_page, runs_for

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STATUSES = [RunStatus.QUEUED, RunStatus.WAITING, RunStatus.STOPPED, RunStatus.DONE]


@pytest.fixture
def runs() -> None:
    for i in range(41):
        Run.objects.create(
            tenant_id="t1" if i % 5 else "t2",
            run_id=f"r{i:02d}",
            agent=("paper-trader", "echo")[i % 2],
            goal=f"goal {i} with <b>text</b>",
            as_of=START,
            status=STATUSES[i % len(STATUSES)],
            stop_reason=("", "budget_steps", "approval_pending")[i % 3],
            usage={"steps": i, "cost_usd": i / 10, "note": "not a number"},
            limits={"max_steps": 10} if i % 2 else {},
            iteration=i,
            created_by="op",
        )
    # Three instants shared by several runs each, and the rest a second apart.
    for run in Run.objects.all():
        n = int(run.run_id[1:])
        at = START + timedelta(seconds=n // 4 if n < 24 else n)
        Run.objects.filter(pk=run.pk).update(created_at=at, updated_at=at)


FILTERS = [
    {"tenant_ids": ["t1"]},
    {"tenant_ids": ["t1", "t2"]},
    {"tenant_ids": ["t2"], "status": "waiting"},
    {"tenant_ids": ["t1", "t2"], "agent": "echo", "stop_reason": "budget_steps"},
    {"tenant_ids": ["t1"], "status": "done", "agent": "paper-trader"},
    {"tenant_ids": ["t1"], "status": "cancelled"},
    {"tenant_ids": ["nobody"]},
    {"tenant_ids": []},
]


def _walk(read, limit: int) -> list[tuple[list[dict], str | None]]:
    pages, cursor = [], None
    while len(pages) <= 41:  # a cursor that repeats a page would walk forever
        page, cursor = read(cursor, limit)
        pages.append((page, cursor))
        if cursor is None:
            return pages
    raise AssertionError(f"more pages than runs: {pages[-2:]}")


@pytest.mark.parametrize(("filters", "limit"), list(itertools.product(FILTERS, [1, 3, 50])))
def test_every_page_and_cursor_is_what_the_orm_gives(runs, filters, limit):
    def by_hand(cursor, limit):
        page = run_rows_page(**filters, columns=RUN_OUT_COLUMNS, cursor=cursor, limit=limit)
        return page.rows, page.next_cursor

    def by_orm(cursor, limit):
        page = RUN_LIST.page(runs_for(**filters).values(*RUN_OUT_COLUMNS), cursor=cursor, limit=limit)
        return page.rows, page.next_cursor

    mine, theirs = _walk(by_hand, limit), _walk(by_orm, limit)
    assert mine == theirs
    rows = [row for page, _ in mine for row in page]
    assert len(rows) == len({row["id"] for row in rows}) == runs_for(**filters).count()
    if rows:  # values converted as the ORM converts them: aware datetimes, JSON as objects
        assert rows[0]["created_at"].tzinfo is not None and isinstance(rows[0]["usage"], dict)


def test_a_page_is_one_statement_and_an_empty_tenant_list_none(runs):
    with CaptureQueriesContext(connection) as queries:
        page = run_rows_page(tenant_ids=["t1"], columns=RUN_OUT_COLUMNS, cursor=None, limit=5)
        run_rows_page(tenant_ids=[], columns=RUN_OUT_COLUMNS, cursor=None, limit=5)
    assert len(page.rows) == 5 and page.next_cursor is not None
    assert len(queries.captured_queries) == 1
    assert "ORDER BY" in queries.captured_queries[0]["sql"]
