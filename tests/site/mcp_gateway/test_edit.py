"""Edit-then-approve of an MCP call: the form and the check come from the upstream's input
schema, and the edited arguments are forwarded once, under a key of their own."""

from __future__ import annotations

import json
import sys

import pytest

from approvals.cards import approval_entry
from approvals.models import Approval
from keelgate.contrib.mcp import call_identity
from mcp_gateway.models import Upstream
from mcp_gateway.services import call_outcome, call_start
from runs.agents import tool_schema
from runs.models import Run
from runs.selectors import run_state
from sitekit.errors import UnknownAgentError
from tenants.api_keys import api_key_create
from tenants.models import Tenant
from tests.site.api.conftest import Api
from tests.site.console.conftest import drain
from tests.site.mcp_gateway._live import UPSTREAM

pytestmark = pytest.mark.django_db(transaction=True)

SEND = {
    "name": "send",
    "description": "Send a message to someone.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "text": {"type": "string", "maxLength": 100},
            "key": {"type": "string"},
        },
        "required": ["to", "text", "key"],
        "additionalProperties": False,
    },
}


def _executions(ledger) -> list[dict]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def _waiting(people, ledger, arguments) -> tuple[Upstream, str, Approval]:
    upstream = Upstream.objects.create(
        tenant_id="t1",
        name="gated",
        command=f"{sys.executable} {UPSTREAM} {ledger}",
        tools=[SEND],
        policy={"tools": {"send": {"idempotency_argument": "key", "approval": True}}},
    )
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
    return upstream, identity.run_id, Approval.objects.get(tenant_id="t1", run_id=identity.run_id)


def test_the_edit_form_is_built_from_the_upstreams_input_schema_less_the_key_argument(people, tmp_path):
    """``tool_schema`` of ``mcp:gated`` is the upstream's schema without ``key``; the card's
    form has ``to`` and ``text`` (limits included), filled with the proposed arguments."""
    _, _, approval = _waiting(people, tmp_path / "ledger", {"to": "ann", "text": "hi"})
    schema = tool_schema("mcp:gated", "gated__send", tenant_id="t1")
    assert schema is not None and set(schema["properties"]) == {"to", "text"}
    assert schema["required"] == ["to", "text"]
    with pytest.raises(UnknownAgentError):  # another tenant has no such upstream
        tool_schema("mcp:gated", "gated__send", tenant_id="t2")
    entry = approval_entry(approval, role="approver", username="op")
    fields = {f.name: f for f in entry.fields}
    assert set(fields) == {"to", "text"}
    assert (fields["to"].value, fields["text"].value, fields["text"].max_length) == ("ann", "hi", 100)


def test_an_edited_mcp_call_is_checked_by_the_upstream_schema_then_forwarded_once_under_a_new_key(
    people, tmp_path
):
    """POST approve with arguments: edits that fail the upstream's schema are 422
    ``edited_arguments_invalid`` naming the field and forward nothing; a valid edit is
    approved, the original denied as replaced, and the worker forwards the edited
    arguments once with a key other than the original's; the call's outcome (what a
    retry of the client's call reads) is the edited call's result."""
    ledger = tmp_path / "ledger"
    _, run_id, approval = _waiting(people, ledger, {"to": "ann", "text": "hi"})
    key = api_key_create(by="tester", tenant=Tenant.objects.get(slug="t1"), user=people["op"], name="op")[1]
    api = Api(key)
    url = f"/approvals/{approval.pk}/approve"
    shown = api.get(f"/approvals/{approval.pk}").json()
    assert shown["tool"] == "gated__send" and shown["arguments"] == {"to": "ann", "text": "hi"}
    for bad, field in (
        ({"text": "x" * 101}, "text"),
        ({"to": 5}, "to"),
        ({"cc": "eve"}, "cc"),
        ({"key": "mine"}, "key"),
    ):
        response = api.post(
            url, {"arguments_hash": shown["arguments_hash"], "arguments": {**shown["arguments"], **bad}}
        )
        assert response.status_code == 422, (bad, response.content)
        body = response.json()
        assert body["code"] == "edited_arguments_invalid" and field in json.dumps(body), body
    assert _executions(ledger) == []
    edited = api.post(
        url,
        {
            "arguments_hash": shown["arguments_hash"],
            "arguments": {"to": "bea", "text": "hello"},
            "note": "to bea",
        },
    )
    assert edited.status_code == 200, edited.content
    body = edited.json()
    assert body["status"] == "approved" and body["edit_of"] == shown["action_id"]
    original = api.get(f"/approvals/{approval.pk}").json()
    assert original["status"] == "denied" and original["replaced_by"] == body["action_id"]
    drain()
    drain()
    (execution,) = _executions(ledger)
    assert (execution["arguments"]["to"], execution["arguments"]["text"]) == ("bea", "hello")
    state = run_state(Run.objects.get(tenant_id="t1", run_id=run_id))
    keys = {a.action_id: a.idempotency_key for a in state.actions}
    assert keys[body["action_id"]] != keys[shown["action_id"]]
    assert execution["arguments"]["key"].startswith("kg_")
    outcome = call_outcome(tenant_id="t1", run_id=run_id)
    assert outcome.kind == "done" and outcome.result is not None
    assert outcome.result["structuredContent"]["key"] == execution["arguments"]["key"]
    assert execution["arguments"]["key"] == keys[body["action_id"]]
    drain()
    assert len(_executions(ledger)) == 1
