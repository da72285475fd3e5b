"""Helpers shared by the process-level worker tests: a PostgreSQL guard and a batch of approved runs."""

from __future__ import annotations

import os

import pytest
from django.db import connection

from approvals.models import Approval
from approvals.services import approval_decide
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_start


def require_postgres(why: str) -> None:
    """Skip on the SQLite pass; with CI=true and a postgres DATABASE_URL, never skip."""
    if connection.vendor == "postgresql":
        return
    if os.environ.get("CI") == "true" and os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.fail("CI asked for PostgreSQL but the test database is not PostgreSQL")
    pytest.skip(f"needs PostgreSQL ({why})")


def approved_runs(op, count: int, prefix: str, *, goal: str = "buy {n} ACME", context: str = "") -> list[str]:
    """Start ``count`` runs, drive each to its pending approval in-process, approve all."""
    ids = [f"{prefix}{i:02d}" for i in range(count)]
    for i, run_id in enumerate(ids):
        run_start(tenant_id="t1", agent="paper-trader", goal=goal.format(n=i + 1), user=op, run_id=run_id)
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    for approval in Approval.objects.filter(tenant_id="t1", run_id__in=ids):
        approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve", note="go")
    queued = Run.objects.filter(run_id__in=ids, status=RunStatus.QUEUED).count()
    assert queued == count, f"{context}: {queued} of {count} runs queued after approval"
    return ids
