"""Decisions through the REST API name the exact call, the key by its id and the address.

Each test decides with a bearer key (or the browser's session) and reads the tenant's
chain: the event names the call by its ``arguments_hash``, says ``via`` ``api`` with the
key's id (never any part of its secret) and the client's address; arguments only for a
tenant of ``KEELGATE_AUDIT_ARGUMENTS``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from approvals.models import Approval, UnknownOutcome
from audit.presentation import event_words
from audit.wiring import audit_log
from runs.agents.brokerage import PaperBrokerage
from runs.services import run_start
from tenants.models import ApiKey
from tests.site.api.conftest import BASE, Api, drain, start_pending

ADDRESS = "10.0.0.4"


def _api(key: str) -> Api:
    """An API client for ``key`` that comes from ADDRESS."""
    client = Api(key)
    client.http = Client(headers={"Authorization": f"Bearer {key}"}, REMOTE_ADDR=ADDRESS)
    return client


def _key_id(key: str) -> str:
    return str(ApiKey.objects.get(prefix=key.split("_")[1]).pk)


def events(kind: str, run_id: str, tenant: str = "t1") -> list[dict[str, Any]]:
    """The bodies of the tenant's events of ``kind`` about ``run_id``, oldest first."""
    return [e.body for e in audit_log().events(tenant) if e.kind == kind and e.body.get("run_id") == run_id]


def _chain_text(tenant: str = "t1") -> str:
    return json.dumps([[e.actor, e.kind, e.body] for e in audit_log().events(tenant)])


def test_an_api_approval_names_the_call_the_key_by_id_and_the_address(keys, pending):
    """approval.decided: the row's arguments_hash, via api, the key's id, the address; no secret anywhere."""
    response = _api(keys.t1).post(
        f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash, "note": "ok"}
    )
    assert response.status_code == 200, response.content
    (decided,) = events("approval.decided", "r1")
    assert decided["arguments_hash"] == pending.arguments_hash
    assert decided["via"] == "api" and decided["key_id"] == _key_id(keys.t1)
    assert decided["address"] == ADDRESS and "arguments" not in decided
    secret = keys.t1.split("_", 2)[2]
    assert secret not in _chain_text() and keys.t1 not in _chain_text()
    assert event_words("approval.decided", decided).endswith(
        f'via API key {_key_id(keys.t1)} from {ADDRESS}. Note: "ok".'
    )


def test_the_policy_adds_the_arguments_to_an_api_approval(keys, pending, settings):
    """With t1 listed, the same approval also carries the arguments and the impact line."""
    settings.KEELGATE_AUDIT_ARGUMENTS = ["t1"]
    assert (
        _api(keys.t1)
        .post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
        .status_code
        == 200
    )
    (decided,) = events("approval.decided", "r1")
    assert decided["arguments"] == json.loads(pending.arguments)
    assert decided["impact"].startswith("buy 10 ACME")


def test_a_high_impact_approval_records_the_confirmation(keys, brokerage_path, settings):
    """sell 150 ACME needs confirm_high_impact: refused without it (nothing audited), then recorded."""
    settings.KEELGATE_AUDIT_ARGUMENTS = ["t1"]
    op = get_user_model().objects.get(username="op")
    run_start(tenant_id="t1", agent="paper-trader", goal="sell 150 ACME", user=op, run_id="h1")
    drain()
    approval = Approval.objects.get(tenant_id="t1", run_id="h1")
    assert approval.high_impact
    client = _api(keys.t1)
    refused = client.post(
        f"/approvals/{approval.pk}/approve", {"arguments_hash": approval.arguments_hash, "note": ""}
    )
    assert refused.json()["code"] == "high_impact_confirmation_required", refused.content
    assert events("approval.decided", "h1") == []
    confirmed = client.post(
        f"/approvals/{approval.pk}/approve",
        {"arguments_hash": approval.arguments_hash, "confirm_high_impact": True},
    )
    assert confirmed.status_code == 200, confirmed.content
    (decided,) = events("approval.decided", "h1")
    assert decided["high_impact"] is True and decided["high_impact_confirmed"] is True
    assert decided["arguments"] == {"symbol": "ACME", "side": "sell", "quantity": 150}
    words = event_words("approval.decided", decided)
    assert words.startswith("place_order approved (1 of 1): sell 150 ACME")
    assert f"high impact confirmed via API key {_key_id(keys.t1)} from {ADDRESS}." in words


def test_an_api_denial_names_the_call_and_the_key(keys, pending):
    """approval.decided (deny) through the API: the hash, via api, the key's id, the address."""
    assert _api(keys.t1).post(f"/approvals/{pending.pk}/deny", {"note": "no"}).status_code == 200
    (decided,) = events("approval.decided", "r1")
    assert decided["decision"] == "deny" and decided["arguments_hash"] == pending.arguments_hash
    assert (decided["via"], decided["key_id"], decided["address"]) == ("api", _key_id(keys.t1), ADDRESS)


def test_an_api_edit_records_old_and_new_values_when_allowed(keys, pending, settings):
    """approval.edited through the API: quantity 10 -> 3 with both values, the key and the address."""
    settings.KEELGATE_AUDIT_ARGUMENTS = ["t1"]
    edited_args = {"symbol": "ACME", "side": "buy", "quantity": 3}
    response = _api(keys.t1).post(
        f"/approvals/{pending.pk}/approve",
        {"arguments_hash": pending.arguments_hash, "arguments": edited_args},
    )
    assert response.status_code == 200, response.content
    (edited,) = events("approval.edited", "r1")
    assert edited["changes"] == {"quantity": {"old": 10, "new": 3}}
    assert edited["edited_arguments"] == edited_args
    assert edited["original_hash"] == pending.arguments_hash
    assert edited["edited_hash"] == Approval.objects.get(pk=response.json()["id"]).arguments_hash
    assert (edited["via"], edited["key_id"], edited["address"]) == ("api", _key_id(keys.t1), ADDRESS)


def test_an_api_reconcile_names_the_call_and_the_key(keys, pending):
    """loop.reconciled through the API: the unknown call's hash, via api, the key's id, the address."""
    client = _api(keys.t1)
    assert (
        client.post(
            f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash}
        ).status_code
        == 200
    )
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    item = UnknownOutcome.objects.get(tenant_id="t1", run_id="r1")
    path = f"/runs/r1/actions/{item.action_id}/reconcile"
    assert client.post(path, {"executed": True, "note": "at the broker"}).status_code == 200
    (settled,) = [e for e in events("loop.reconciled", "r1") if e["source"] == "human"]
    assert settled["arguments_hash"] == pending.arguments_hash
    assert (settled["via"], settled["key_id"], settled["address"]) == ("api", _key_id(keys.t1), ADDRESS)


def test_an_api_cancel_and_bulk_say_the_key(keys, brokerage_path):
    """run.cancelled and each bulk decision name the key by its id and the address."""
    first = start_pending("t1", "op", run_id="b1")
    second = start_pending("t1", "op", run_id="b2")
    client = _api(keys.t1)
    assert client.post("/runs/b1/cancel", {"note": "stop"}).status_code == 200
    (cancelled,) = events("run.cancelled", "b1")
    assert cancelled["withdrawn_calls"][0]["arguments_hash"] == first.arguments_hash
    assert (cancelled["via"], cancelled["key_id"], cancelled["address"]) == ("api", _key_id(keys.t1), ADDRESS)
    bulk = client.post(
        "/approvals/bulk/approve",
        {"items": [{"id": second.pk, "arguments_hash": second.arguments_hash}], "note": ""},
    )
    assert bulk.status_code == 200, bulk.content
    (decided,) = events("approval.decided", "b2")
    assert decided["arguments_hash"] == second.arguments_hash
    assert (decided["via"], decided["key_id"]) == ("api", _key_id(keys.t1))


@pytest.mark.parametrize("proxy", [False, True])
def test_the_browser_session_on_the_api_is_the_console_and_the_address_is_the_peers(keys, pending, proxy):
    """A session (no key) deciding through the API is ``console`` with no key id; the address is
    REMOTE_ADDR (what Daphne's --proxy-headers sets), never an X-Forwarded-For the client sent."""
    session = Client(REMOTE_ADDR=ADDRESS, enforce_csrf_checks=False)
    session.force_login(get_user_model().objects.get(username="op"))
    headers = {"X-Forwarded-For": "203.0.113.99"} if proxy else {}
    response = session.post(
        f"{BASE}/approvals/{pending.pk}/approve?tenant=t1",
        json.dumps({"arguments_hash": pending.arguments_hash}),
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 200, response.content
    (decided,) = events("approval.decided", "r1")
    assert decided["via"] == "console" and "key_id" not in decided and decided["address"] == ADDRESS
