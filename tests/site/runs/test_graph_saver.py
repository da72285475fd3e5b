"""The site's LangGraph saver: LangGraph's conformance suite on SQLite and PostgreSQL, tenants, fencing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from django.utils import timezone
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from keelgate.contrib.langgraph import KeelgateSaver
from keelgate.errors import StaleOwnerError
from runs.engine.fencing import Fence
from runs.engine.graph_saver import site_saver
from runs.models import GraphCheckpoint, GraphWrite, Run
from tests.contrib.langgraph.conformance import REQUIRED, pass_counts


@checkpointer_test(name="KeelgateSaver on Django")
async def django_saver() -> AsyncGenerator[KeelgateSaver, None]:
    """The site's saver (the test's database: SQLite, or PostgreSQL with DATABASE_URL)."""
    yield site_saver(tenant_id="acme")


def test_langgraph_conformance_suite_passes_on_the_site_database(transactional_db, monkeypatch, capsys):
    """Every capability of LangGraph's suite passes on the Django saver, on this test run's database."""
    from django.db import connection

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as the worker: one loop, sequential ORM calls
    report = asyncio.run(validate(django_saver))
    with capsys.disabled():
        print(f"\nKeelgateSaver on Django ({connection.vendor})\n{pass_counts(report)}")
    assert {name for name, r in report.results.items() if r.detected} >= REQUIRED
    assert [f for r in report.results.values() for f in r.failures] == []
    assert report.conformance_level() == "FULL"


def put(saver: KeelgateSaver, thread: str, n: int) -> dict:
    checkpoint = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n})
    return saver.put(generate_config(thread), checkpoint, generate_metadata(step=n), {"n": n})


def test_another_tenants_thread_is_absent(db):
    """A thread of one tenant is invisible to another tenant's saver, and untouched by its deletes."""
    put(site_saver(tenant_id="acme"), "r1", 1)
    other = site_saver(tenant_id="globex")
    assert other.get_tuple(generate_config("r1")) is None
    assert list(other.list(None)) == []
    other.delete_thread("r1")
    other.prune(["r1"], strategy="delete")
    assert GraphCheckpoint.objects.filter(tenant_id="acme", thread_id="r1").count() == 1


def test_a_worker_that_lost_its_lease_cannot_write_the_runs_thread(db):
    """With the run's epoch bumped by another claim, the old fence's put and put_writes raise stale_owner."""
    run = Run.objects.create(
        tenant_id="acme", run_id="r1", agent="a", goal="g", as_of=timezone.now(), lease_epoch=1
    )
    owned = site_saver(tenant_id="acme", fence=Fence("acme", "r1", 1))
    stored = put(owned, "r1", 1)
    owned.put_writes(stored, [("ch", "ok")], "task-1")
    with pytest.raises(StaleOwnerError):
        put(owned, "other-thread", 2)  # a fence writes its own run's thread only
    Run.objects.filter(pk=run.pk).update(lease_epoch=2)
    with pytest.raises(StaleOwnerError) as refused:
        put(owned, "r1", 3)
    assert refused.value.code == "stale_owner"
    with pytest.raises(StaleOwnerError):
        owned.put_writes(stored, [("ch", "late")], "task-2")
    assert GraphCheckpoint.objects.filter(tenant_id="acme", thread_id="r1").count() == 1
    assert list(GraphWrite.objects.filter(tenant_id="acme").values_list("task_id", flat=True)) == ["task-1"]
    put(site_saver(tenant_id="acme", fence=Fence("acme", "r1", 2)), "r1", 4)
