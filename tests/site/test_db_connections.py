"""Each PostgreSQL connection reads timestamps with psycopg's C loader and gets what Django would."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.utils import timezone

from runs.models import Run
from tests.site.runs._batch import require_postgres

pytestmark = pytest.mark.django_db


def _timestamptz_loader() -> tuple[type, object]:
    from psycopg import postgres
    from psycopg.adapt import Transformer
    from psycopg.pq import Format

    oid = postgres.types["timestamptz"].oid
    with connection.cursor() as cursor:
        registered = cursor.cursor.adapters.get_loader(oid, Format.TEXT)
        made = Transformer(cursor.cursor).get_loader(oid, Format.TEXT)
    return registered, made


def test_a_cursor_reads_timestamps_with_psycopgs_c_loader() -> None:
    require_postgres("the timestamp loader is psycopg's")
    import psycopg

    registered, made = _timestamptz_loader()
    # Django compared its time zone with the registered loader's and kept it for the cursor.
    assert registered.__name__ == "_CTimestamptzLoader"
    if psycopg.pq.__impl__ in ("binary", "c"):
        assert type(made).__module__.startswith(("psycopg_binary", "psycopg_c")), type(made)


def test_timestamps_read_back_as_the_same_aware_utc_datetimes() -> None:
    require_postgres("the timestamp loader is psycopg's")
    at = datetime.datetime(
        2026, 3, 29, 1, 30, 15, 123456, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    run = Run.objects.create(tenant_id="t1", run_id="ts-1", agent="a", goal="g", as_of=at)
    read = Run.objects.values_list("as_of", flat=True).get(pk=run.pk)
    assert read == at
    assert read.tzinfo is datetime.UTC
    assert read.isoformat() == "2026-03-28T23:30:15.123456+00:00"
    assert Run.objects.filter(created_at__lt=timezone.now()).count() == 1
