"""The site hands runs to Temporal when KEELGATE_RUNNER=temporal (real dev server)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from approvals.models import Approval
from approvals.services import approval_decide
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run, RunStatus
from runs.services import run_start
from tests.contrib.temporal.test_temporal_runner import env  # noqa: F401  (the dev server fixture)
from tests.site._audit import logged


async def wait_for_status(run_id: str, status: str, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if Run.objects.get(run_id=run_id).status == status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{run_id} never reached {status}: {Run.objects.get(run_id=run_id).status}")


def site_worker(env, settings, monkeypatch):  # noqa: F811  (env: the dev server)
    """The site set to hand runs to Temporal on a queue of this test's, and the worker on it."""
    from keelgate.contrib.temporal import temporal_worker
    from runs.engine.temporal import loop_for, record_outcome

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    settings.KEELGATE_RUNNER = "temporal"
    settings.KEELGATE_TEMPORAL_ADDRESS = env.client.service_client.config.target_host
    settings.KEELGATE_TEMPORAL_TASK_QUEUE = f"site-{uuid.uuid4().hex[:8]}"
    return temporal_worker(
        env.client,
        task_queue=settings.KEELGATE_TEMPORAL_TASK_QUEUE,
        loop_factory=loop_for,
        on_outcome=record_outcome,
        heartbeat_every=0.2,
    )


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_run_queued_in_the_site_is_executed_by_temporal(
    env,  # noqa: F811  (the dev-server fixture imported above)
    operator,
    brokerage_path,
    settings,
    monkeypatch,
):
    """run_start dispatches a workflow; after approval a second one finishes with one order."""
    worker = site_worker(env, settings, monkeypatch)
    async with worker:
        run_start(tenant_id="t1", agent="paper-trader", goal="buy 4 ACME", user=operator, run_id="tr1")
        await wait_for_status("tr1", RunStatus.WAITING)
        approval = Approval.objects.get(run_id="tr1")
        approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
        await wait_for_status("tr1", RunStatus.DONE)
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]
    assert Run.objects.get(run_id="tr1").outcome == "completed"  # Temporal's ending names it too


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_standing_approval_releases_a_temporal_run_with_nobody_clicking(
    env,  # noqa: F811  (the dev-server fixture imported above)
    operator,
    brokerage_path,
    settings,
    monkeypatch,
):
    """The workflow stops for the order; its outcome recorded as waiting is the worker's release
    (``run_waiting``), so op's standing approval approves it there and a second workflow runs the
    order once, audited as the rule's use."""
    from datetime import timedelta

    from django.utils import timezone

    from approvals.models import ApprovalStatus
    from approvals.standing import standing_create

    worker = site_worker(env, settings, monkeypatch)
    made = standing_create(
        tenant_id="t1",
        user=operator,
        agent="paper-trader",
        tool="place_order",
        bounds={"quantity": {"max": 5}},
        expires_at=timezone.now() + timedelta(days=1),
    )
    async with worker:
        run_start(tenant_id="t1", agent="paper-trader", goal="buy 4 ACME", user=operator, run_id="tr-rule")
        await wait_for_status("tr-rule", RunStatus.DONE)
    approval = Approval.objects.get(run_id="tr-rule")
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by == operator.username
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]
    used = logged().filter(tenant_id="t1", kind="approval.standing_used")
    assert [json.loads(e.body)["rule_id"] for e in used] == [made.pk]
