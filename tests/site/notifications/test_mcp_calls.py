"""An MCP call that needs approval is announced like any other waiting call: the approval
webhook messages (its tool ``<upstream>__<tool>``, its agent's run) and the waiting email."""

from __future__ import annotations

import sys

import pytest

from approvals.models import Approval
from approvals.services import approval_decide
from keelgate.contrib.mcp import call_identity
from mcp_gateway.models import Upstream
from mcp_gateway.services import call_start
from notifications.emails import send_due
from tenants.models import Role
from tests.site.mcp_gateway._live import UPSTREAM
from tests.site.notifications._scenario import deliver_until_settled, drain
from tests.site.notifications.mail import CONSOLE, member, smtp
from tests.site.notifications.test_payloads import by_type, register

__all__ = ["smtp"]  # the fixture, imported to be used

pytestmark = pytest.mark.django_db(transaction=True)

SEND = {
    "name": "send",
    "description": "Send a message to someone.",
    "inputSchema": {"type": "object", "properties": {"to": {"type": "string"}, "text": {"type": "string"}}},
}


def test_an_mcp_call_waiting_for_approval_is_webhooked_and_mailed(operator, receivers, smtp, tmp_path):
    """Waiting: ``approval.requested`` (tool ``gated__send``, the call's run, its arguments on
    opt-in) and one email to the approver linking its card; approved and forwarded:
    ``approval.decided`` by op and ``run.finished`` completed."""
    alice = member("t1", "alice", Role.APPROVER)
    receiver = receivers()
    register(receiver, include_arguments=True)
    upstream = Upstream.objects.create(
        tenant_id="t1",
        name="gated",
        command=f"{sys.executable} {UPSTREAM} {tmp_path / 'ledger'}",
        tools=[SEND],
        policy={"tools": {"send": {"approval": True}}},
    )
    arguments = {"to": "ann", "text": "hi"}
    run_id = call_identity(tenant_id="t1", mcp_run="m", tool="gated__send", arguments=arguments).run_id
    call_start(tenant_id="t1", user=alice, upstream=upstream, tool="send", arguments=arguments, run_id=run_id)
    drain()
    approval = Approval.objects.get(tenant_id="t1", run_id=run_id)

    assert send_due() == 1
    (mail,) = smtp.to("alice@example.test")
    assert f"- gated__send in tenant t1, run {run_id}" in mail.text
    assert f"approve or deny: {CONSOLE}/#item-a-{approval.pk}" in mail.text

    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
    drain()
    deliver_until_settled()
    got = by_type(receiver)
    (requested,) = got["approval.requested"]
    assert requested["data"]["run_id"] == run_id and requested["data"]["tool"] == "gated__send"
    assert requested["data"]["arguments"] == arguments
    assert requested["data"]["console_url"] == f"{CONSOLE}/runs/t1/{run_id}/"
    (decided,) = got["approval.decided"]
    assert (decided["data"]["run_id"], decided["data"]["verdict"], decided["data"]["by"]) == (
        run_id,
        "approved",
        "op",
    )
    (finished,) = got["run.finished"]
    assert (finished["data"]["run_id"], finished["data"]["outcome"]) == (run_id, "completed")
