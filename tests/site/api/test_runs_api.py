"""The runs router: start, list with filters and cursors, read, timeline, resume."""

from __future__ import annotations

import base64
import json

from approvals.services import approval_decide
from audit.models import AuditEvent
from runs.models import Run, RunStatus
from tests.site.api.conftest import drain

START = {"agent": "paper-trader", "goal": "buy 10 ACME"}


def test_starting_a_run_answers_201_with_the_queued_run_attributed_to_the_key_user(client):
    """POST /runs creates a queued run created_by the key's user, and a run.requested event by them."""
    response = client.post("/runs", {**START, "run_id": "r1", "limits": {"max_iterations": 5}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["run_id"] == "r1" and body["status"] == "queued" and body["created_by"] == "op"
    assert body["limits"]["max_iterations"] == 5 and body["resumable"] is False
    run = Run.objects.get(tenant_id="t1", run_id="r1")
    assert run.limits == {"max_iterations": 5}
    event = AuditEvent.objects.get(tenant_id="t1", kind="run.requested")
    assert event.actor == "op"


def test_a_run_gets_a_generated_id_when_none_is_given(client):
    """Without run_id each POST starts a new run with a fresh id."""
    first = client.post("/runs", START).json()["run_id"]
    second = client.post("/runs", START).json()["run_id"]
    assert first != second and Run.objects.count() == 2


def test_the_same_run_id_returns_the_same_run_and_another_request_with_it_is_409(client):
    """A repeat with the same run_id is 200 with the existing run; another goal with that id is run_exists."""
    assert client.post("/runs", {**START, "run_id": "r1"}).status_code == 201
    again = client.post("/runs", {**START, "run_id": "r1"})
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["run_id"] == "r1" and Run.objects.count() == 1
    clash = client.post("/runs", {"agent": "paper-trader", "goal": "sell 1 ACME", "run_id": "r1"})
    assert clash.status_code == 409 and clash.json()["code"] == "run_exists"
    assert AuditEvent.objects.filter(kind="run.requested").count() == 1


def test_unknown_agents_unreadable_goals_and_bad_budgets_are_422(client):
    """unknown_agent, goal_not_understood and a validation error naming the stop field; nothing is created."""
    unknown = client.post("/runs", {"agent": "nope", "goal": "buy 1 ACME"})
    assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_agent"
    goal = client.post("/runs", {"agent": "paper-trader", "goal": "make me rich"})
    assert goal.status_code == 422 and goal.json()["code"] == "goal_not_understood"
    budget = client.post("/runs", {**START, "stop": {"max_iterations": 0}})
    assert budget.status_code == 422 and "body.stop.max_iterations" in budget.json()["detail"]
    unknown_field = client.post("/runs", {**START, "stop": {"max_turns": 3}})
    assert unknown_field.status_code == 422 and "body.stop.max_turns" in unknown_field.json()["detail"]
    assert not Run.objects.exists()


def test_a_viewer_cannot_start_or_resume_runs(api, keys, pending):
    """Role checks as in the console: a viewer's key gets 403 forbidden on writes, 200 on reads."""
    viewer = api(keys.viewer)
    response = viewer.post("/runs", START)
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert viewer.post("/runs/r1/resume", {}).status_code == 403
    assert viewer.get("/runs/r1").status_code == 200


def test_runs_are_listed_newest_first_and_filtered(client, pending):
    """GET /runs filters by status, agent and stop_reason."""
    client.post("/runs", {**START, "run_id": "r2"})
    ids = [r["run_id"] for r in client.get("/runs").json()["items"]]
    assert ids == ["r2", "r1"]
    assert [r["run_id"] for r in client.get("/runs", {"status": "waiting"}).json()["items"]] == ["r1"]
    assert [
        r["run_id"] for r in client.get("/runs", {"stop_reason": "approval_pending"}).json()["items"]
    ] == ["r1"]
    assert client.get("/runs", {"agent": "other-agent"}).json()["items"] == []
    assert len(client.get("/runs", {"agent": "paper-trader"}).json()["items"]) == 2
    bad = client.get("/runs", {"status": "sleeping"})
    assert bad.status_code == 422 and "query.status" in bad.json()["detail"]


def test_cursor_pagination_walks_every_run_once(client):
    """Pages of 2 over 5 runs: every run exactly once, newest first, then no next cursor."""
    for n in range(5):
        client.post("/runs", {**START, "run_id": f"r{n}"})
    seen, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = client.get("/runs", params).json()
        seen += [r["run_id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["r4", "r3", "r2", "r1", "r0"]


def test_a_bad_cursor_is_422_invalid_cursor(client):
    """A cursor this API did not hand out is invalid_cursor, never a 500."""
    for cursor in ["bm90LWpzb24", "WyJ4IiwxXQ", "WzEsMl0", "WyIyMDI2LTAxLTAxVDAwOjAwOjAwIiwxXQ", "A"]:
        response = client.get("/runs", {"cursor": cursor})
        assert response.status_code == 422, cursor
        assert response.json() == {
            "code": "invalid_cursor",
            "detail": "The cursor is not valid; start again without one.",
        }
    shape = client.get("/runs", {"cursor": "not a cursor!"})
    assert shape.status_code == 422 and "query.cursor" in shape.json()["detail"]


def test_a_cursor_at_a_time_no_database_holds_is_422_not_500(client):
    """Year 1 at +14:00 is before the first UTC instant: invalid_cursor, on SQLite too (it was a 500)."""
    for at in ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]:
        cursor = base64.urlsafe_b64encode(json.dumps([at, 1]).encode()).decode().rstrip("=")
        for path in ["/runs", "/approvals", "/unknown-outcomes"]:
            response = client.get(path, {"cursor": cursor})
            assert response.status_code == 422 and response.json()["code"] == "invalid_cursor", (path, at)


def test_a_run_reads_with_its_actions_usage_and_stop_reason(client, pending):
    """GET /runs/{id}: waiting on approval, the order action awaiting approval, arguments as JSON text."""
    body = client.get("/runs/r1").json()
    assert body["status"] == "waiting" and body["stop_reason"] == "approval_pending"
    assert body["resumable"] is False and body["usage"]["model_calls"] >= 1
    order = next(a for a in body["actions"] if a["tool"] == "place_order")
    assert order["status"] == "awaiting_approval" and order["arguments"]["symbol"] == "ACME"
    assert order["arguments"]["quantity"] == 10 and order["approval"]["required"] == 1
    quote = next(a for a in body["actions"] if a["tool"] == "get_quote")
    assert quote["status"] == "done" and quote["output"] == {"price": 101.5, "symbol": "ACME"}


def test_a_missing_run_and_a_malformed_run_id_are_404_and_422(client):
    """An id nobody has is not_found; an id of the wrong shape is a validation error naming path.run_id."""
    missing = client.get("/runs/nope")
    assert missing.status_code == 404 and missing.json() == {"code": "not_found", "detail": "Not found."}
    bad = client.get("/runs/" + "x" * 129)
    assert bad.status_code == 422 and "path.run_id" in bad.json()["detail"]


def test_the_timeline_lists_checkpoints_oldest_first_and_pages_by_seq(client, pending):
    """GET /runs/{id}/checkpoints: seqs ascending; after_seq continues where a page stopped."""
    items = client.get("/runs/r1/checkpoints").json()["items"]
    seqs = [c["seq"] for c in items]
    assert seqs == sorted(seqs) and len(seqs) >= 2
    assert items[-1]["stop_reason"] == "approval_pending"
    first = client.get("/runs/r1/checkpoints", {"limit": 1}).json()
    assert [c["seq"] for c in first["items"]] == seqs[:1] and first["next_after_seq"] == seqs[0]
    rest = client.get("/runs/r1/checkpoints", {"after_seq": first["next_after_seq"]}).json()
    assert [c["seq"] for c in rest["items"]] == seqs[1:] and rest["next_after_seq"] is None


def test_only_a_stopped_run_resumes_and_new_stop_conditions_apply(client, keys, brokerage_path):
    """A waiting run is not_resumable (409); a budget stop resumes with a larger budget and finishes."""
    client.post("/runs", {**START, "run_id": "r1", "stop": {"max_iterations": 1}})
    drain()
    waiting = client.post("/runs/r1/resume", {})
    assert waiting.status_code == 409 and waiting.json()["code"] == "not_resumable"
    approval = client.get("/approvals").json()["items"][0]
    assert (
        client.post(
            f"/approvals/{approval['id']}/approve", {"arguments_hash": approval["arguments_hash"]}
        ).status_code
        == 200
    )
    drain()
    stopped = client.get("/runs/r1").json()
    assert stopped["status"] == "stopped" and stopped["resumable"] is True
    resumed = client.post("/runs/r1/resume", {"stop": {"max_iterations": 5}})
    assert resumed.status_code == 200 and resumed.json()["status"] == "queued"
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert AuditEvent.objects.get(kind="run.resumed").actor == "op"


def test_resume_takes_no_body_too(client, keys, brokerage_path, operator):
    """POST /runs/{id}/resume without a body resumes with the old limits."""
    client.post("/runs", {**START, "run_id": "r1", "stop": {"max_iterations": 1}})
    drain()
    approval = client.get("/approvals").json()["items"][0]
    approval_decide(tenant_id="t1", approval_id=approval["id"], user=operator, decision="approve")
    drain()
    response = client.post("/runs/r1/resume")
    assert response.status_code == 200, response.content


def test_the_limits_go_in_as_limits_and_stop_is_their_deprecated_old_name(client):
    """`limits` both ways; `stop` means the same (under one Idempotency-Key too); given both, `limits`."""
    old = client.post("/runs", {**START, "stop": {"max_iterations": 3}}, **{"Idempotency-Key": "k-limits"})
    assert old.status_code == 201 and old.json()["limits"]["max_iterations"] == 3
    new = client.post("/runs", {**START, "limits": {"max_iterations": 3}}, **{"Idempotency-Key": "k-limits"})
    assert new.status_code == 200 and new.json()["run_id"] == old.json()["run_id"]  # the same request
    both = client.post("/runs", {**START, "limits": {"max_iterations": 5}, "stop": {"max_iterations": 4}})
    assert both.status_code == 201 and both.json()["limits"]["max_iterations"] == 5
