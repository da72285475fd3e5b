"""Inputs that mean what they say: the reconcile result, strict types, own codes, no silent params."""

from __future__ import annotations

import logging

import pytest

from approvals.models import UnknownOutcome
from audit.selectors import audit_verify
from audit.wiring import audit_log
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Run, RunStatus
from tests.site.api.conftest import drain
from tests.site.api.test_approvals_api import make_unknown


def reconcile_path(item: UnknownOutcome) -> str:
    return f"/runs/{item.run_id}/actions/{item.action_id}/reconcile"


def test_a_reconcile_with_the_brokerages_record_ends_with_an_answer_that_matches_the_ledger(client, pending):
    """executed + result: the worker finishes with "Bought 10 ACME at <price> (order <id>)", verified."""
    item = make_unknown(client, pending)
    (entry,) = PaperBrokerage().ledger()
    record = {"order_id": entry.result["order_id"], "price": entry.result["price"]}
    response = client.post(
        reconcile_path(item), {"executed": True, "note": "in the ledger", "result": record}
    )
    assert response.status_code == 200, response.content
    drain()
    run = Run.objects.get(run_id="r1")
    state = DjangoCheckpointStore().load("t1", "r1")
    assert run.status == RunStatus.DONE and run.stop_reason == "goal_reached"
    assert (
        state.final_answer
        == f"Bought 10 ACME at {entry.result['price']} (order {entry.result['order_id']}) as recorded by op."
    )
    assert state.verdicts[-1].decision == "accept"
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]
    event = next(e for e in audit_log().events("t1") if e.kind == "loop.reconciled")
    assert event.body["note"] == "in the ledger" and event.body["result_recorded"] is True
    assert audit_verify(tenant_id="t1").ok


def test_a_reconcile_without_a_result_never_ends_with_not_placed(client, pending):
    """executed, no result: the answer says the order went through and its result was not recorded."""
    item = make_unknown(client, pending)
    assert client.post(reconcile_path(item), {"executed": True, "note": "seen"}).status_code == 200
    drain()
    state = DjangoCheckpointStore().load("t1", "r1")
    assert "not placed" not in state.final_answer
    assert (
        state.final_answer
        == "Bought 10 ACME: op confirmed the order went through; its result was not recorded."
    )
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE


def test_an_abandoned_order_is_reported_as_not_placed(client, pending):
    """executed=false: the answer says it was not placed, and the verifier accepts that."""
    item = make_unknown(client, pending)
    assert client.post(reconcile_path(item), {"executed": False, "note": "not there"}).status_code == 200
    drain()
    state = DjangoCheckpointStore().load("t1", "r1")
    assert state.final_answer == "The order to buy 10 ACME was not placed."
    assert state.verdicts[-1].decision == "accept"


@pytest.mark.parametrize(
    "body",
    [
        {"executed": "yes", "note": "x"},
        {"executed": "true", "note": "x"},
        {"executed": 1, "note": "x"},
        {"executed": 0, "note": "x"},
        {"executed": None, "note": "x"},
        {"executed": True, "note": 5},
        {"executed": True, "note": "x", "result": "PB-000001"},
        {"executed": True, "note": "x", "result": ["PB-000001"]},
        {"executed": True, "note": "x", "result": {"blob": "x" * 20_000}},
        {"executed": True, "note": "x", "extra": 1},
    ],
    ids=[
        "yes",
        "true_text",
        "one",
        "zero",
        "null",
        "note_number",
        "result_text",
        "result_list",
        "too_big",
        "extra",
    ],
)
def test_a_lax_or_malformed_reconcile_is_422_and_settles_nothing(client, pending, body):
    """No coercion: a string, a number or null is never read as a boolean settlement."""
    item = make_unknown(client, pending)
    response = client.post(reconcile_path(item), body)
    assert response.status_code == 422 and response.json()["code"] == "invalid_input", response.content
    item.refresh_from_db()
    assert item.settled is False


def test_a_result_for_a_call_that_did_not_run_is_refused(client, pending):
    """executed=false with a result: 422 result_invalid, the item stays open."""
    item = make_unknown(client, pending)
    response = client.post(reconcile_path(item), {"executed": False, "note": "x", "result": {"a": 1}})
    assert response.status_code == 422 and response.json()["code"] == "result_invalid"
    item.refresh_from_db()
    assert item.settled is False


def test_a_repeated_reconcile_is_409_outcome_already_settled_naming_who(client, pending):
    """Not approval_already_decided: the code says what was settled."""
    item = make_unknown(client, pending)
    assert client.post(reconcile_path(item), {"executed": True, "note": "seen"}).status_code == 200
    again = client.post(reconcile_path(item), {"executed": False, "note": "second thoughts"})
    assert again.status_code == 409
    assert again.json()["code"] == "outcome_already_settled" and again.json()["detail"].endswith("(op)")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/runs", {"agent": "paper-trader", "goal": "buy 1 ACME", "stop": {"max_iterations": "5"}}),
        ("/runs", {"agent": "paper-trader", "goal": "buy 1 ACME", "stop": {"max_iterations": True}}),
        ("/runs", {"agent": "paper-trader", "goal": "buy 1 ACME", "stop": {"max_dollars": "1"}}),
        ("/runs", {"agent": "paper-trader", "goal": 7}),
    ],
)
def test_numbers_and_strings_are_not_coerced_either(client, keys, path, body):
    """A budget of "5" or true iterations is a 422, not a run with 5 (or 1) iterations."""
    response = client.post(path, body)
    assert response.status_code == 422 and response.json()["code"] == "invalid_input", response.content
    assert not Run.objects.exists()


def test_audit_events_filter_by_kind(client, pending):
    """?kind= lists only that kind; the chain still reads oldest first."""
    kinds = {e["kind"] for e in client.get("/audit/events").json()["items"]}
    assert {"run.requested", "run.status"} <= kinds
    only = client.get("/audit/events", {"kind": "run.status"}).json()["items"]
    assert only and {e["kind"] for e in only} == {"run.status"}
    assert [e["seq"] for e in only] == sorted(e["seq"] for e in only)
    assert client.get("/audit/events", {"kind": "Bad Kind!"}).status_code == 422


@pytest.mark.parametrize(
    "path",
    [
        "/runs?stauts=done",
        "/approvals?statuss=all",
        "/audit/events?knd=x",
        "/unknown-outcomes?x=1",
        "/runs/r1?y=2",
    ],
)
def test_a_query_parameter_the_api_does_not_know_is_422_not_ignored(client, pending, path):
    """A typo must not silently widen a listing: the unknown name is reported."""
    response = client.http.get("/api/v1" + path)
    assert response.status_code == 422 and response.json()["code"] == "invalid_input"
    assert "unknown query parameter" in response.json()["detail"]


def test_arguments_and_outputs_are_json_values(client, pending):
    """The API returns untrusted arguments and outputs as JSON values, not JSON text inside JSON."""
    approval = client.get(f"/approvals/{pending.pk}").json()
    assert approval["arguments"] == {"quantity": 10, "side": "buy", "symbol": "ACME"}
    run = client.get("/runs/r1").json()
    quote = next(a for a in run["actions"] if a["tool"] == "get_quote")
    assert quote["output"] == {"price": 101.5, "symbol": "ACME"}
    assert run["actions"][1]["output"] is None


def test_no_request_writes_a_key_a_session_or_a_password_to_the_logs(client, keys, pending, caplog, settings):
    """Every shape of credential, right or wrong, in DEBUG too: the secret never reaches a log line."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    settings.DEBUG = True  # ninja logs a foreign auth scheme only in DEBUG
    caplog.set_level(logging.DEBUG)
    secret = keys.t1
    for header in [
        f"Token {secret}",
        f"token {secret}",
        f"Basic {secret}",
        f"Bearer {secret}x",
        f"Bearer  {secret}",
        f"bearer {secret}",
        secret,
        f"Bearer {secret[:-4]}",
    ]:
        Client(headers={"Authorization": header}).get("/api/v1/runs", {"limit": "bad"})
        Client(headers={"Authorization": header}).post(
            "/api/v1/runs", data="{bad json", content_type="application/json"
        )
    browser = Client()
    browser.post("/login/", {"username": "op", "password": "wrong-password-123"})
    browser.post("/login/", {"username": "op", "password": "pw-op-123456"})
    session = browser.cookies.get("sessionid")
    browser.get("/api/v1/approvals?bad=1")
    text = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    assert caplog.records, "the test must have produced log records to check"
    assert secret not in text and secret[len("kg_") + 13 :] not in text  # the key, and its secret part
    assert "wrong-password-123" not in text and "pw-op-123456" not in text
    assert session is not None and session.value not in text
    assert get_user_model().objects.filter(username="op").exists()


def test_the_api_edits_then_approves_and_binds_approvals_to_their_arguments(client, pending):
    """POST approve with arguments: the edited call's approval comes back; bad edits 422; stale hash 409."""
    url = f"/approvals/{pending.pk}/approve"
    shown = client.get(f"/approvals/{pending.pk}").json()
    assert len(shown["arguments_hash"]) == 64
    stale = client.post(url, {"arguments_hash": "f" * 64})
    assert stale.status_code == 409 and stale.json()["code"] == "approval_stale"
    for bad in [{"quantity": "5"}, {"quantity": 0}, {"side": "steal"}, {"extra": 1}]:
        response = client.post(
            url, {"arguments_hash": shown["arguments_hash"], "arguments": {**shown["arguments"], **bad}}
        )
        assert response.status_code == 422, (bad, response.content)
        assert response.json()["code"] == "edited_arguments_invalid"
    edited = client.post(
        url,
        {
            "arguments_hash": shown["arguments_hash"],
            "arguments": {**shown["arguments"], "quantity": 3},
            "note": "three",
        },
    )
    assert edited.status_code == 200, edited.content
    body = edited.json()
    assert body["edit_of"] == shown["action_id"] and body["status"] == "approved"
    assert body["arguments"]["quantity"] == 3 and body["arguments_hash"] != shown["arguments_hash"]
    original = client.get(f"/approvals/{pending.pk}").json()
    assert original["status"] == "denied" and original["replaced_by"] == body["action_id"]
    drain()
    assert [(e.quantity, e.executions) for e in PaperBrokerage().ledger()] == [(3, 1)]
    event = next(e for e in audit_log().events("t1") if e.kind == "approval.edited")
    assert event.actor == "op" and event.body["changed"] == ["quantity"]


def test_an_integer_is_read_as_json_schema_reads_one(client, keys):
    """5.0 is the integer 5 (JSON Schema, and schemathesis, say so); 5.5 is not an integer."""
    ok = client.post(
        "/runs", {"agent": "paper-trader", "goal": "buy 1 ACME", "stop": {"max_iterations": 5.0}}
    )
    assert ok.status_code == 201, ok.content
    assert Run.objects.get(run_id=ok.json()["run_id"]).limits["max_iterations"] == 5
    half = client.post(
        "/runs", {"agent": "paper-trader", "goal": "buy 1 ACME", "stop": {"max_iterations": 5.5}}
    )
    assert half.status_code == 422
