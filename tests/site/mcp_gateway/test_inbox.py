"""An MCP call waiting for a person is a run like any other: in the inbox, on its run page,
decided with the console's services, then forwarded once by a worker."""

from __future__ import annotations

import json
import sys

import pytest

from approvals.models import Approval
from approvals.services import approval_decide
from keelgate.contrib.mcp import call_identity
from mcp_gateway.models import Upstream
from mcp_gateway.services import call_outcome, call_start
from runs.models import Run
from tests.site._threads import all_returned, at_once
from tests.site.console.conftest import drain, login
from tests.site.mcp_gateway._live import UPSTREAM

pytestmark = pytest.mark.django_db(transaction=True)

SEND = {
    "name": "send",
    "description": "Send a message to someone.",
    "inputSchema": {"type": "object", "properties": {"to": {}, "text": {}, "key": {}}},
}


def _executions(ledger) -> list[dict]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def test_a_gated_call_waits_in_the_inbox_and_runs_once_after_approval(people, tmp_path):
    """The call's run stops on its approval (nothing forwarded); bob's inbox lists
    ``gated__send`` of agent ``mcp:gated``; the run page opens; approved, a worker forwards it
    once with the key in ``key``, and the outcome is the upstream's result."""
    ledger = tmp_path / "ledger"
    upstream = Upstream.objects.create(
        tenant_id="t1",
        name="gated",
        command=f"{sys.executable} {UPSTREAM} {ledger}",
        tools=[SEND],
        policy={"tools": {"send": {"idempotency_argument": "key", "approval": True}}},
    )
    arguments = {"to": "ann", "text": "hi"}
    identity = call_identity(tenant_id="t1", mcp_run="m", tool="gated__send", arguments=arguments)
    call_start(
        tenant_id="t1",
        user=people["bob"],
        upstream=upstream,
        tool="send",
        arguments=arguments,
        run_id=identity.run_id,
    )
    drain()
    assert call_outcome(tenant_id="t1", run_id=identity.run_id).kind == "awaiting_approval"
    assert _executions(ledger) == []
    approval = Approval.objects.get(tenant_id="t1", run_id=identity.run_id)
    assert (approval.tool, approval.agent) == ("gated__send", "mcp:gated")
    client = login(people["bob"])
    inbox = client.get("/").content.decode()
    assert f'id="item-a-{approval.pk}"' in inbox and "gated__send" in inbox and "mcp:gated" in inbox
    assert client.get(f"/runs/t1/{identity.run_id}/").status_code == 200
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    drain()
    drain()
    outcome = call_outcome(tenant_id="t1", run_id=identity.run_id)
    assert outcome.kind == "done" and outcome.result is not None
    (execution,) = _executions(ledger)
    assert execution["arguments"]["key"] == outcome.result["structuredContent"]["key"]
    assert execution["arguments"]["key"].startswith("kg_")


def test_the_same_call_arriving_twice_at_once_is_one_run(people, tmp_path):
    """Four arrivals of one call released together: one run created, every arrival gets it."""
    upstream = Upstream.objects.create(tenant_id="t1", name="u", command="x", tools=[SEND])
    arguments = {"to": "ann", "text": "same"}
    identity = call_identity(tenant_id="t1", mcp_run="m", tool="u__send", arguments=arguments)

    def arrive():
        return call_start(
            tenant_id="t1",
            user=people["bob"],
            upstream=upstream,
            tool="send",
            arguments=arguments,
            run_id=identity.run_id,
        )

    outcomes = all_returned(at_once([arrive] * 4))
    assert sorted(created for _, created in outcomes) == [False, False, False, True]
    assert {run.pk for run, _ in outcomes} == {Run.objects.get(run_id=identity.run_id).pk}
