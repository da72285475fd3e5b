"""What receivers get: Standard Webhooks signatures, a message per event, its fields, arguments on opt-in."""

from __future__ import annotations

import json

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from audit.models import AuditEvent
from notifications.models import WebhookDelivery
from notifications.webhooks.events import EVENT_TYPES, webhook_event
from notifications.webhooks.services import webhook_endpoint_register
from notifications.webhooks.signing import new_secret, signed_headers
from tenants.models import Tenant
from tests.site.notifications._scenario import SECRET_ARGUMENT, deliver_until_settled, every_event

CONSOLE = "https://console.example.test"


def register(receiver, **kwargs):
    endpoint, secret = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url=receiver.url, actor="test", **kwargs
    )
    receiver.secret = secret
    return endpoint


def by_type(receiver) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for request in receiver.acknowledged():
        found.setdefault(request.payload["type"], []).append(request.payload)
    return found


def test_signing_matches_the_standard_webhooks_library():
    """Our stdlib signature verifies with ``standardwebhooks``; a changed byte or id does not."""
    secret = new_secret()
    assert secret.startswith("whsec_")
    body = b'{"type":"x","timestamp":"2026-01-01T00:00:00+00:00","data":{}}'
    import time

    headers = signed_headers([secret], "msg_t1_5", int(time.time()), body)
    assert Webhook(secret).verify(body, headers)["type"] == "x"
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b'"x"', b'"y"'), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, {**headers, "webhook-id": "msg_t1_6"})
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


def test_every_event_reaches_the_receiver_signed_with_its_fields(operator, brokerage_path, receivers):
    """Each event type arrives verified by ``standardwebhooks``: tenant, run, action, tool, console link."""
    receiver = receivers()
    register(receiver)
    every_event(operator)
    deliver_until_settled()

    assert receiver.requests and all(r.verified for r in receiver.requests)
    got = by_type(receiver)
    assert set(got) == set(EVENT_TYPES) - {"approval.escalated"}
    for payloads in got.values():
        for payload in payloads:
            data = payload["data"]
            assert data["tenant"] == "t1"
            assert data["run_id"] and data["console_url"] == f"{CONSOLE}/runs/t1/{data['run_id']}/"
            assert "arguments" not in data
            assert payload["timestamp"].endswith("+00:00")
    requested = {p["data"]["run_id"]: p["data"] for p in got["approval.requested"]}
    assert set(requested) == {"r-ok", "r-deny", "r-unk", "r-exp"}
    assert requested["r-ok"]["tool"] == "place_order" and requested["r-ok"]["action_id"]
    assert requested["r-ok"]["required_approvals"] == 1
    verdicts = {(p["data"]["run_id"], p["data"]["verdict"], p["data"]["by"]) for p in got["approval.decided"]}
    assert verdicts == {("r-ok", "approved", "op"), ("r-deny", "denied", "op"), ("r-unk", "approved", "op")}
    assert [p["data"]["run_id"] for p in got["outcome.unknown"]] == ["r-unk"]
    (settled,) = got["outcome.settled"]
    assert (settled["data"]["run_id"], settled["data"]["verdict"], settled["data"]["by"]) == (
        "r-unk",
        "executed",
        "op",
    )
    finished = sorted(
        (p["data"]["run_id"], p["data"]["status"], p["data"]["outcome"], p["data"]["reason"])
        for p in got["run.finished"]
    )
    assert finished == [  # a denial is the loop's goal_reached, and the outcome says what happened
        ("r-deny", "done", "denied", "goal_reached"),
        ("r-ok", "done", "completed", "goal_reached"),
        ("r-unk", "done", "completed", "goal_reached"),
    ]
    (expiring,) = got["approval.expiring"]
    assert expiring["data"]["run_id"] == "r-exp" and expiring["data"]["expires_at"]
    assert expiring["data"]["escalates_to"] == "admin"
    assert expiring["data"]["action_id"] == requested["r-exp"]["action_id"]


def test_one_message_per_event_with_an_id_made_of_tenant_and_chain_number(
    operator, brokerage_path, receivers
):
    """``webhook-id`` is ``msg_<tenant>_<seq>`` of the audit event the message is about."""
    receiver = receivers()
    register(receiver)
    every_event(operator)
    deliver_until_settled()
    for request in receiver.acknowledged():
        seq = request.payload["data"]["audit_seq"]
        assert request.webhook_id == f"msg_t1_{seq}"
        event = AuditEvent.objects.get(tenant_id="t1", seq=seq)
        assert webhook_event(event.kind, event.actor, json.loads(event.body)).type == request.payload["type"]
    ids = [r.webhook_id for r in receiver.acknowledged()]
    assert len(ids) == len(set(ids)) == WebhookDelivery.objects.count()


def test_arguments_are_left_out_unless_the_tenant_opted_in(operator, brokerage_path, receivers):
    """Without opt-in no body contains the order's symbol; with it, the call's arguments are in ``data``."""
    plain, opted = receivers(), receivers()
    register(plain)
    register(opted, include_arguments=True)
    every_event(operator)
    deliver_until_settled()

    assert plain.requests and opted.requests
    for request in plain.requests:
        assert SECRET_ARGUMENT not in json.dumps(request.payload)
    got = by_type(opted)
    for payload in got["approval.requested"]:
        arguments = payload["data"]["arguments"]
        assert arguments["symbol"] == SECRET_ARGUMENT and arguments["side"] == "buy"
    quantities = {p["data"]["run_id"]: p["data"]["arguments"]["quantity"] for p in got["approval.requested"]}
    assert quantities == {"r-ok": 3, "r-deny": 4, "r-unk": 5, "r-exp": 6}
    (unknown,) = got["outcome.unknown"]
    assert unknown["data"]["arguments"]["quantity"] == 5
    assert all("arguments" not in p["data"] for p in got["run.finished"])


def test_an_event_filter_sends_only_the_events_chosen(operator, brokerage_path, receivers):
    """An endpoint registered for two types gets those and nothing else."""
    receiver = receivers()
    register(receiver, events=["approval.requested", "run.finished"])
    every_event(operator)
    deliver_until_settled()
    assert set(by_type(receiver)) == {"approval.requested", "run.finished"}
    assert len(by_type(receiver)["approval.requested"]) == 4


def test_a_receiver_hears_of_events_from_its_registration_on(operator, brokerage_path, receivers):
    """What happened before an endpoint existed is not replayed to it; what follows is."""
    early = receivers()
    register(early)
    every_event(operator)
    late = receivers()
    register(late)
    deliver_until_settled()
    assert early.acknowledged() and not late.requests


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        (
            "approval.expired",
            {"run_id": "r", "action_id": "1-2", "tool": "t"},
            ("approval.decided", "expired"),
        ),
        (
            "approval.edited",
            {
                "run_id": "r",
                "action_id": "1-2",
                "tool": "t",
                "new_action_id": "1-2e",
                "changed": ["quantity"],
            },
            ("approval.decided", "edited"),
        ),
        (
            "approval.decided",
            {
                "run_id": "r",
                "action_id": "1-2",
                "tool": "t",
                "decision": "approve",
                "approvals": 1,
                "required": 2,
            },
            ("approval.decided", "approval_recorded"),
        ),
        ("gateway.call", {"run_id": "r", "action_id": "1-2", "tool": "t", "status": "done"}, None),
        ("run.status", {"run_id": "r", "status": "waiting"}, None),
        ("run.status", {"run_id": "r", "status": "cancelled"}, ("run.finished", None)),
        ("run.stopped", {"run_id": "r", "reason": "goal_reached"}, None),
    ],
)
def test_which_audit_kinds_become_which_events(kind, body, expected):
    """Expired and edited approvals are decisions; 1 of 2 votes is not yet approved; a run finishes once."""
    event = webhook_event(kind, "agent:x", body)
    if expected is None:
        assert event is None
        return
    assert event is not None and event.type == expected[0]
    if expected[1] is not None:
        assert event.data["verdict"] == expected[1]


def test_escalations_pass_through_without_arguments():
    """``approval.escalated`` keeps its plain fields but never arguments or an idempotency key."""
    event = webhook_event(
        "approval.escalated",
        "expiry",
        {
            "run_id": "r",
            "action_id": "1-2",
            "tool": "t",
            "escalated_to": "admin",
            "expires_at": "2030-01-01T00:00:00+00:00",
            "previous_expires_at": "2029-12-31T20:00:00+00:00",
            "arguments": {"x": 1},
            "idempotency_key": "k",
        },
    )
    assert event is not None and event.type == "approval.escalated"
    assert event.data["escalated_to"] == "admin" and event.data["expires_at"].startswith("2030")
    assert "arguments" not in event.data and "idempotency_key" not in event.data


def test_the_documented_run_finished_payload_is_what_the_builder_sends():
    """docs/how-to/notifications.md's example has exactly the fields a ``run.finished`` message has."""
    from pathlib import Path

    from notifications.models import WebhookEndpoint
    from notifications.webhooks.messages import webhook_payload

    text = (Path(__file__).resolve().parents[3] / "docs/how-to/notifications.md").read_text()
    documented = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    body = {"run_id": "r-42", "status": "done", "reason": "goal_reached", "outcome": "denied"}
    event = webhook_event("run.status", "worker", body)
    endpoint = WebhookEndpoint(tenant=Tenant(slug="acme"), include_arguments=False)
    sent = json.loads(webhook_payload(endpoint, 311, "2026-12-04T20:41:15.120000+00:00", event))
    assert set(sent) == set(documented) and set(sent["data"]) == set(documented["data"])
    assert {k: v for k, v in sent["data"].items() if k != "console_url"} == {
        k: v for k, v in documented["data"].items() if k != "console_url"
    }
