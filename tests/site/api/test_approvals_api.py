"""The inbox router: list, read, approve, deny, unknown outcomes, reconcile."""

from __future__ import annotations

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run, RunStatus
from tests.site._audit import logged
from tests.site.api.conftest import drain


def make_unknown(client, pending) -> UnknownOutcome:
    """Approve r1, let the brokerage fail after executing: one open unknown outcome."""
    assert (
        client.post(
            f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash}
        ).status_code
        == 200
    )
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    return UnknownOutcome.objects.get(tenant_id="t1", run_id="r1")


def test_the_inbox_lists_pending_approvals_by_default(client, pending):
    """GET /approvals: the pending approval with its arguments as JSON text; other statuses on request."""
    items = client.get("/approvals").json()["items"]
    assert [a["id"] for a in items] == [pending.pk]
    assert items[0]["status"] == "pending" and items[0]["tool"] == "place_order"
    assert items[0]["arguments"]["symbol"] == "ACME"  # a JSON value, not JSON text
    assert client.get("/approvals", {"status": "approved"}).json()["items"] == []
    assert len(client.get("/approvals", {"status": "all"}).json()["items"]) == 1
    assert client.get(f"/approvals/{pending.pk}").json()["run_id"] == "r1"


def test_approving_settles_the_item_requeues_the_run_and_is_attributed(client, pending):
    """POST approve: approved, decided_by the key's user, run queued, audit event by that user."""
    response = client.post(
        f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash, "note": "looks right"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "approved" and body["decided_by"] == "op"
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED
    decided = logged().get(tenant_id="t1", kind="approval.decided")
    assert decided.actor == "op" and '"decision":"approve"' in decided.body


def test_a_decisions_answer_is_the_row_as_stored(client, pending):
    """What approve and deny answer (set from the saved state, not read back) is what GET reads."""
    approved = client.post(
        f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash, "note": "looks right"}
    ).json()
    assert approved == client.get(f"/approvals/{pending.pk}").json()
    shown = client.get(f"/approvals/{pending.pk}").json()
    assert shown["votes"][0]["by"] == "op" and shown["decided_at"] is not None


def test_deciding_a_settled_approval_is_409_naming_who_settled_it(client, api, keys, pending, operator):
    """A second approve or a deny after approval: 409 approval_already_decided with the first decider."""
    client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
    for path, body in [
        ("approve", {"arguments_hash": pending.arguments_hash}),
        ("deny", {"note": "too late"}),
    ]:
        response = client.post(f"/approvals/{pending.pk}/{path}", body)
        assert response.status_code == 409
        assert response.json() == {
            "code": "approval_already_decided",
            "detail": "That item was already settled. (op)",
        }


def test_deny_needs_a_note_and_then_the_order_is_never_placed(client, pending):
    """Deny without a note, or a blank one, is 422 naming body.note; with one, denied and no order."""
    missing = client.post(f"/approvals/{pending.pk}/deny", {})
    assert missing.status_code == 422 and "body.note" in missing.json()["detail"]
    blank = client.post(f"/approvals/{pending.pk}/deny", {"note": "   "})
    assert blank.status_code == 422 and "body.note" in blank.json()["detail"]
    denied = client.post(f"/approvals/{pending.pk}/deny", {"note": "not today"})
    assert denied.status_code == 200 and denied.json()["status"] == "denied"
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert PaperBrokerage().ledger() == []


def test_a_note_that_only_python_sees_as_blank_is_note_required(client, pending):
    """The service's own rule still answers: a note of an information separator is note_required (422)."""
    response = client.post(f"/approvals/{pending.pk}/deny", {"note": "\x1c"})
    assert response.status_code == 422 and response.json()["code"] == "note_required"
    assert Approval.objects.get(pk=pending.pk).status == ApprovalStatus.PENDING


def test_a_viewer_cannot_decide(api, keys, pending):
    """A viewer's key: 403 forbidden on approve and deny; the item stays pending."""
    viewer = api(keys.viewer)
    assert (
        viewer.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash}).json()[
            "code"
        ]
        == "forbidden"
    )
    assert viewer.post(f"/approvals/{pending.pk}/deny", {"note": "no"}).status_code == 403
    assert Approval.objects.get(pk=pending.pk).status == ApprovalStatus.PENDING


def test_approval_ids_of_the_wrong_shape_are_422_and_missing_ones_404(client, pending):
    """Non-numbers, zero and numbers past a bigint are validation errors; an unknown id is not_found."""
    for bad in ["abc", "0", "-1", "1.5", str(2**63), "9" * 40]:
        response = client.post(f"/approvals/{bad}/approve")
        assert response.status_code == 422, bad
        assert "path.approval_id" in response.json()["detail"]
    assert (
        client.post(
            f"/approvals/{pending.pk + 1000}/approve", {"arguments_hash": pending.arguments_hash}
        ).status_code
        == 404
    )
    assert client.get(f"/approvals/{2**63 - 1}").status_code == 404


def test_an_unknown_outcome_is_listed_and_reconciled_once(client, pending):
    """GET /unknown-outcomes lists it; reconcile settles it as the key's user; a second is 409 naming them."""
    item = make_unknown(client, pending)
    listed = client.get("/unknown-outcomes").json()["items"]
    assert [(i["run_id"], i["action_id"]) for i in listed] == [("r1", item.action_id)]
    assert listed[0]["idempotency_key"] == item.idempotency_key and listed[0]["settled"] is False
    path = f"/runs/r1/actions/{item.action_id}/reconcile"
    no_note = client.post(path, {"executed": True})
    assert no_note.status_code == 422 and "body.note" in no_note.json()["detail"]
    wrong_type = client.post(path, {"executed": "maybe", "note": "x"})
    assert wrong_type.status_code == 422 and "body.executed" in wrong_type.json()["detail"]
    settled = client.post(path, {"executed": True, "note": "seen at the broker"})
    assert settled.status_code == 200, settled.content
    assert settled.json()["settled"] is True and settled.json()["settled_by"] == "op"
    again = client.post(path, {"executed": False, "note": "second thoughts"})
    assert again.status_code == 409 and again.json()["detail"].endswith("(op)")
    assert client.get("/unknown-outcomes").json()["items"] == []
    assert len(client.get("/unknown-outcomes", {"state": "settled"}).json()["items"]) == 1
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]


def test_reconcile_needs_the_reconciler_role_and_an_existing_item(api, keys, client, pending):
    """A viewer is 403; an action without an unknown outcome is 404."""
    item = make_unknown(client, pending)
    viewer = api(keys.viewer)
    path = f"/runs/r1/actions/{item.action_id}/reconcile"
    assert viewer.post(path, {"executed": True, "note": "x"}).status_code == 403
    assert client.post("/runs/r1/actions/nope/reconcile", {"executed": True, "note": "x"}).status_code == 404


def test_reconciling_a_call_whose_outcome_is_known_is_409_saying_where_it_stands(client, pending):
    """An action awaiting approval, or done, is not an unknown outcome: 409 with a code, not 404."""
    path = f"/runs/r1/actions/{pending.action_id}/reconcile"
    waiting = client.post(path, {"executed": True, "note": "x"})
    assert waiting.status_code == 409, waiting.content
    assert waiting.json()["code"] == "not_an_unknown_outcome"
    assert waiting.json()["detail"].endswith("(the call place_order is awaiting approval)")
    assert (
        client.post(
            f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash}
        ).status_code
        == 200
    )
    drain()
    done = client.post(path, {"executed": False, "note": "x"})
    assert done.status_code == 409 and done.json()["detail"].endswith("(the call place_order is done)")
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]  # nothing settled
    assert client.post("/runs/r404/actions/1-1/reconcile", {"executed": True, "note": "x"}).status_code == 404


def test_check_asks_the_system_of_record_and_settles_nothing(api, keys, client, pending):
    """POST /unknown-outcomes/{id}/check: the brokerage's record by key, nothing settled; 403/404/409."""
    item = make_unknown(client, pending)
    path = f"/unknown-outcomes/{item.pk}/check"
    found = client.post(path)
    assert found.status_code == 200, found.content
    entry = PaperBrokerage().entry(item.idempotency_key)
    assert found.json() == {"verdict": "executed", "record": entry.result, "problem": ""}
    assert not UnknownOutcome.objects.get(pk=item.pk).settled
    assert api(keys.viewer).post(path).status_code == 403
    assert client.post(f"/unknown-outcomes/{item.pk + 1000}/check").status_code == 404
    assert client.post("/unknown-outcomes/0/check").status_code == 422
    reconciled = client.post(
        f"/runs/r1/actions/{item.action_id}/reconcile", {"executed": True, "note": "seen"}
    )
    assert reconciled.status_code == 200
    again = client.post(path)
    assert again.status_code == 409 and again.json()["code"] == "outcome_already_settled"
