"""The database task store of the Tasks extension: a handle on a run, its status read from the run."""

from __future__ import annotations

import json
import sys

import pytest

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from keelgate.contrib.mcp import call_identity
from mcp_gateway.models import CallTask, Upstream
from mcp_gateway.services import call_start
from mcp_gateway.tasks import task_cancel, task_create, task_view
from runs.models import Run, RunStatus
from sitekit.errors import NotFoundError
from tests.site.console.conftest import drain
from tests.site.mcp_gateway._live import UPSTREAM

pytestmark = pytest.mark.django_db(transaction=True)

SEND = {"name": "send", "inputSchema": {"type": "object", "properties": {"to": {}, "text": {}, "key": {}}}}


def _gated_call(people, tmp_path, text: str) -> tuple[str, object]:
    ledger = tmp_path / "ledger"
    upstream, _ = Upstream.objects.get_or_create(
        tenant_id="t1",
        name="gated",
        defaults={
            "command": f"{sys.executable} {UPSTREAM} {ledger}",
            "tools": [SEND],
            "policy": {"tools": {"send": {"idempotency_argument": "key", "approval": True}}},
        },
    )
    arguments = {"to": "ann", "text": text}
    identity = call_identity(tenant_id="t1", mcp_run="m", tool="gated__send", arguments=arguments)
    call_start(
        tenant_id="t1",
        user=people["bob"],
        upstream=upstream,
        tool="send",
        arguments=arguments,
        run_id=identity.run_id,
    )
    return identity.run_id, ledger


def _executions(ledger) -> list[dict]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def test_a_task_is_stored_at_once_and_its_status_follows_the_run(people, tmp_path):
    """Queued, then waiting for the approval (both ``working``), then ``completed`` with the
    upstream's result once approved and forwarded: each read from the run, never stored."""
    run_id, ledger = _gated_call(people, tmp_path, "follow")
    created = task_create(tenant_id="t1", run_id=run_id, user=people["bob"])
    row = CallTask.objects.get(task_id=created.task_id)
    assert (row.tenant_id, row.run_id, row.created_by) == ("t1", run_id, "bob")
    assert created.status == "working" and "Queued" in created.message
    drain()
    waiting = task_view(tenant_id="t1", task_id=created.task_id)
    assert waiting.status == "working" and "approval" in waiting.message
    approval = Approval.objects.get(tenant_id="t1", run_id=run_id)
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    drain()
    drain()
    done = task_view(tenant_id="t1", task_id=created.task_id)
    assert done.status == "completed" and done.outcome.kind == "done"
    (execution,) = _executions(ledger)
    assert done.outcome.result is not None
    assert done.outcome.result["structuredContent"]["key"] == execution["arguments"]["key"]


def test_task_ids_are_unguessable_distinct_and_found_only_in_their_tenant(people, tmp_path):
    """Two tasks of one call get two random ids; another tenant, or an id nobody issued, finds nothing."""
    run_id, _ = _gated_call(people, tmp_path, "scoped")
    first = task_create(tenant_id="t1", run_id=run_id, user=people["bob"])
    second = task_create(tenant_id="t1", run_id=run_id, user=people["bob"])
    assert first.task_id != second.task_id and min(len(first.task_id), len(second.task_id)) >= 43
    with pytest.raises(NotFoundError):
        task_view(tenant_id="t2", task_id=first.task_id)
    with pytest.raises(NotFoundError):
        task_view(tenant_id="t1", task_id=first.task_id[:-1] + ("A" if first.task_id[-1] != "A" else "B"))
    with pytest.raises(NotFoundError):
        task_cancel(tenant_id="t2", task_id=first.task_id, user=people["eve"])
    assert Run.objects.get(tenant_id="t1", run_id=run_id).status != RunStatus.CANCELLED


def test_cancelling_a_task_withdraws_the_calls_approval(people, tmp_path):
    """``task_cancel`` cancels the run through the decisions' service: the approval is withdrawn,
    the task (and another task of the same call) reads ``cancelled``, nothing is forwarded."""
    run_id, ledger = _gated_call(people, tmp_path, "withdraw")
    task = task_create(tenant_id="t1", run_id=run_id, user=people["bob"])
    other = task_create(tenant_id="t1", run_id=run_id, user=people["bob"])
    drain()
    cancelled = task_cancel(tenant_id="t1", task_id=task.task_id, user=people["bob"])
    assert cancelled.status == "cancelled" and "bob" in cancelled.message
    assert task_view(tenant_id="t1", task_id=other.task_id).status == "cancelled"
    assert Approval.objects.get(tenant_id="t1", run_id=run_id).status == ApprovalStatus.WITHDRAWN
    drain()
    assert _executions(ledger) == []


def test_cancelling_a_task_whose_call_is_done_changes_nothing(people, tmp_path):
    """A cancel that comes after the call was forwarded is acknowledged and the task stays
    ``completed`` with its result (cancellation is a request, not a promise)."""
    run_id, ledger = _gated_call(people, tmp_path, "late")
    task = task_create(tenant_id="t1", run_id=run_id, user=people["bob"])
    drain()
    approval = Approval.objects.get(tenant_id="t1", run_id=run_id)
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    drain()
    drain()
    after = task_cancel(tenant_id="t1", task_id=task.task_id, user=people["bob"])
    assert after.status == "completed" and after.outcome.kind == "done"
    assert len(_executions(ledger)) == 1
