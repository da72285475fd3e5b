"""Decisions in the console name the exact call, the channel and the address in their audit events.

Each test decides through the console's forms (Django's test client, a session) and then
reads the tenant's chain: the event names the call by its ``arguments_hash`` (the inbox
row's), says ``via`` ``console`` and the client's ``REMOTE_ADDR``, never an API key; the
arguments themselves only when ``KEELGATE_AUDIT_ARGUMENTS`` names the tenant.
"""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from approvals.models import Approval
from audit.presentation import event_words
from audit.wiring import audit_log
from keelgate.canonical import canonical_sha256
from tests.site.console.conftest import drain, start_waiting

HTMX = {"HTTP_HX_REQUEST": "true"}
ADDRESS = "10.0.0.4"
CONSOLE_BODY = {"via": "console", "address": ADDRESS}


def _client(user: Any) -> Client:
    client = Client(REMOTE_ADDR=ADDRESS)
    client.force_login(user)
    return client


def events(kind: str, run_id: str) -> list[dict[str, Any]]:
    """The bodies of t1's events of ``kind`` about ``run_id``, oldest first."""
    return [e.body for e in audit_log().events("t1") if e.kind == kind and e.body.get("run_id") == run_id]


def test_an_approval_names_its_call_by_hash_and_says_console_and_the_address(people, brokerage_path):
    """approval.decided: the row's arguments_hash, no arguments (the default), via console from
    REMOTE_ADDR, no key id; approval.requested and the WRITE's gateway.call name the same call."""
    approval = start_waiting(people["op"], "c1")
    response = _client(people["bob"]).post(
        f"/approvals/{approval.pk}/approve/",
        {"note": "ok", "arguments_hash": approval.arguments_hash},
        **HTMX,
    )
    assert response.status_code == 200
    (decided,) = events("approval.decided", "c1")
    assert decided["arguments_hash"] == approval.arguments_hash
    assert decided["arguments_hash"] == canonical_sha256(json.loads(approval.arguments))
    assert {k: decided.get(k) for k in CONSOLE_BODY} == CONSOLE_BODY
    assert "key_id" not in decided and "arguments" not in decided and "impact" not in decided
    assert decided["high_impact"] is False and decided["high_impact_confirmed"] is False
    (requested,) = events("approval.requested", "c1")
    assert requested["arguments_hash"] == approval.arguments_hash and "arguments" not in requested
    drain()
    writes = [e for e in events("gateway.call", "c1") if e["tool"] == "place_order"]
    assert [(e["status"], e["arguments_hash"]) for e in writes] == [("done", approval.arguments_hash)]
    assert all("arguments" not in e for e in events("gateway.call", "c1"))


def test_the_tenants_policy_puts_the_arguments_and_the_impact_line_in(people, brokerage_path, settings):
    """With t1 in KEELGATE_AUDIT_ARGUMENTS: a high-impact sell, confirmed, says what was sold,
    that the confirmation was given, and reads so on the audit page."""
    settings.KEELGATE_AUDIT_ARGUMENTS = ["t1"]
    approval = start_waiting(people["op"], "c2", goal="sell 150 ACME")
    assert approval.high_impact
    response = _client(people["bob"]).post(
        f"/approvals/{approval.pk}/approve/",
        {"note": "", "arguments_hash": approval.arguments_hash, "confirm": "approve"},
        **HTMX,
    )
    assert response.status_code == 200
    (decided,) = events("approval.decided", "c2")
    assert decided["arguments"] == {"symbol": "ACME", "side": "sell", "quantity": 150}
    assert decided["impact"].startswith("sell 150 ACME")
    assert decided["high_impact"] is True and decided["high_impact_confirmed"] is True
    (requested,) = events("approval.requested", "c2")
    assert requested["arguments"] == decided["arguments"] and requested["high_impact"] is True
    words = event_words("approval.decided", decided)
    assert words.startswith("place_order approved (1 of 1): sell 150 ACME")
    assert words.endswith(f"high impact confirmed in the console from {ADDRESS}.")


def test_another_tenant_is_not_covered_by_t1s_policy(people, brokerage_path, settings):
    """Only the named tenants get arguments: with t2 listed, t1's events still carry the hash only."""
    settings.KEELGATE_AUDIT_ARGUMENTS = ["t2"]
    approval = start_waiting(people["op"], "c3")
    _client(people["bob"]).post(f"/approvals/{approval.pk}/approve/", {"note": ""}, **HTMX)
    (decided,) = events("approval.decided", "c3")
    assert decided["arguments_hash"] == approval.arguments_hash and "arguments" not in decided


def test_a_denial_names_its_call_and_how_it_came(people, brokerage_path):
    """approval.decided (deny): the hash, via console, the address, the note."""
    approval = start_waiting(people["op"], "c4")
    response = _client(people["bob"]).post(f"/approvals/{approval.pk}/deny/", {"note": "too big"}, **HTMX)
    assert response.status_code == 200
    (decided,) = events("approval.decided", "c4")
    assert decided["decision"] == "deny" and decided["note"] == "too big"
    assert decided["arguments_hash"] == approval.arguments_hash
    assert {k: decided.get(k) for k in CONSOLE_BODY} == CONSOLE_BODY


def test_an_edit_records_old_and_new_values_when_allowed(people, brokerage_path, settings):
    """approval.edited: each changed field old -> new, both hashes, via console and address."""
    settings.KEELGATE_AUDIT_ARGUMENTS = ["*"]
    approval = start_waiting(people["op"], "c5")
    body = {"edit": "1", "arguments_hash": approval.arguments_hash, "note": "smaller"}
    body.update({"arg.symbol": "ACME", "arg.side": "buy", "arg.quantity": "4"})
    assert _client(people["bob"]).post(f"/approvals/{approval.pk}/approve/", body, **HTMX).status_code == 200
    (edited,) = events("approval.edited", "c5")
    assert edited["changed"] == ["quantity"]
    assert edited["changes"] == {"quantity": {"old": 10, "new": 4}}
    assert edited["original_hash"] == approval.arguments_hash
    assert edited["edited_hash"] == canonical_sha256({"symbol": "ACME", "side": "buy", "quantity": 4})
    assert edited["edited_arguments"]["quantity"] == 4 and edited["arguments"]["quantity"] == 10
    assert {k: edited.get(k) for k in CONSOLE_BODY} == CONSOLE_BODY
    assert "quantity 10 → 4" in event_words("approval.edited", edited)


def test_an_edit_without_the_policy_records_field_names_and_hashes_only(people, brokerage_path):
    """By default approval.edited names what changed and both hashes, never a value."""
    approval = start_waiting(people["op"], "c6")
    body = {"edit": "1", "arguments_hash": approval.arguments_hash, "note": "smaller"}
    body.update({"arg.symbol": "ACME", "arg.side": "buy", "arg.quantity": "4"})
    _client(people["bob"]).post(f"/approvals/{approval.pk}/approve/", body, **HTMX)
    (edited,) = events("approval.edited", "c6")
    assert edited["changed"] == ["quantity"] and edited["original_hash"] == approval.arguments_hash
    assert not {"changes", "arguments", "edited_arguments", "impact", "edited_impact"} & set(edited)


def test_a_reconcile_names_its_call_and_how_it_came(people, unknown):
    """loop.reconciled by a person in the console: the call's hash, via console, the address."""
    response = _client(people["rita"]).post(
        f"/unknown/{unknown.pk}/reconcile/", {"executed": "no", "note": "not in the ledger"}, **HTMX
    )
    assert response.status_code == 200
    (settled,) = events("loop.reconciled", "u1")
    assert settled["source"] == "human" and settled["verdict"] == "not_executed"
    assert settled["arguments_hash"] == canonical_sha256(json.loads(unknown.arguments))
    assert {k: settled.get(k) for k in CONSOLE_BODY} == CONSOLE_BODY and "arguments" not in settled


def test_a_cancel_names_the_withdrawn_calls_and_how_it_came(people, brokerage_path):
    """run.cancelled from the run page: each withdrawn call's hash, via console, the address."""
    approval = start_waiting(people["op"], "c7")
    response = _client(people["bob"]).post("/runs/t1/c7/cancel/", {"note": "stop", "confirm": "yes"})
    assert response.status_code == 303
    (cancelled,) = events("run.cancelled", "c7")
    assert cancelled["withdrawn"] == [approval.action_id]
    assert cancelled["withdrawn_calls"] == [
        {"action_id": approval.action_id, "tool": "place_order", "arguments_hash": approval.arguments_hash}
    ]
    assert {k: cancelled.get(k) for k in CONSOLE_BODY} == CONSOLE_BODY


def test_a_bulk_approval_says_how_each_decision_came(people, brokerage_path):
    """Each decision of a bulk approval is its own event, each naming its call and the channel."""
    first, second = start_waiting(people["op"], "c8"), start_waiting(people["op"], "c9")
    ids = [f"{a.pk}:{a.arguments_hash}" for a in (first, second)]
    _client(people["bob"]).post("/approvals/bulk/", {"decision": "approve", "ids": ids, "note": ""}, **HTMX)
    for approval in (first, second):
        (decided,) = events("approval.decided", approval.run_id)
        assert decided["arguments_hash"] == approval.arguments_hash
        assert {k: decided.get(k) for k in CONSOLE_BODY} == CONSOLE_BODY
    assert Approval.objects.filter(run_id__in=["c8", "c9"], status="approved").count() == 2
