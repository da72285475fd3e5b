"""A key of tenant t2 tries every endpoint on tenant t1's objects: absent (404), never counted."""

from __future__ import annotations

from approvals.models import Approval, ApprovalStatus, StandingApproval, UnknownOutcome
from audit.checkpoints import sign_checkpoint
from audit.models import AuditEvent
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run
from tests.site.api.conftest import drain, start_pending


def openapi_operations(client) -> set[tuple[str, str]]:
    """Every (METHOD, path template) of the live OpenAPI document, without the /api/v1 prefix."""
    spec = client.get("/openapi.json").json()
    return {
        (method.upper(), path.removeprefix("/api/v1"))
        for path, item in spec["paths"].items()
        for method in item
    }


def test_a_key_of_another_tenant_finds_nothing_of_this_one(api, keys, client, pending, pending_t2):
    """Every operation with t2's key on t1's run, approval and unknown outcome is 404 or lists only t2's."""
    # t1 also gets an unknown outcome (run u1), so every kind of object exists in t1.
    unknown_run = start_pending("t1", "op", run_id="u1")
    assert (
        client.post(
            f"/approvals/{unknown_run.pk}/approve", {"arguments_hash": unknown_run.arguments_hash}
        ).status_code
        == 200
    )
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    unknown = UnknownOutcome.objects.get(tenant_id="t1", run_id="u1")
    rule = {
        "agent": "paper-trader",
        "tool": "place_order",
        "bounds": {"quantity": {"max": 1}},
        "expires_in_days": 1,
    }
    t1_rule = client.post("/standing-approvals", rule).json()["id"]
    t1_digest = client.get("/audit/head").json()
    t1_events = AuditEvent.objects.filter(tenant_id="t1").count()

    other = api(keys.t2)
    covered: set[tuple[str, str]] = set()

    def call(method: str, template: str, path: str, body=None, params=None):
        covered.add((method, template))
        if method == "GET":
            return other.get(path, params)
        return other.post(path, body)

    def absent(response) -> None:
        assert response.status_code == 404, response.content
        assert response.json() == {"code": "not_found", "detail": "Not found."}

    # Lists: only t2's objects, whatever the filters.
    runs = call("GET", "/runs", "/runs", params={"limit": 200}).json()
    assert [r["run_id"] for r in runs["items"]] == ["r2"] and runs["next_cursor"] is None
    assert [r["run_id"] for r in other.get("/runs", {"status": "waiting"}).json()["items"]] == ["r2"]
    approvals = call("GET", "/approvals", "/approvals", params={"status": "all"}).json()["items"]
    assert [a["id"] for a in approvals] == [pending_t2.pk]
    outcomes = call("GET", "/unknown-outcomes", "/unknown-outcomes", params={"state": "all"}).json()
    assert outcomes["items"] == []
    events = call("GET", "/audit/events", "/audit/events", params={"limit": 500}).json()["items"]
    assert len(events) == AuditEvent.objects.filter(tenant_id="t2").count()
    assert all("u1" not in str(e["body"]) and e["actor"] != "op" for e in events)
    report = call("GET", "/audit/verify", "/audit/verify").json()
    assert report["checked"] == len(events) != t1_events
    assert call("GET", "/audit/head", "/audit/head").json()["tenant_id"] == "t2"
    # The tree: t2's origin, key, checkpoints and proofs; t1's numbers beyond t2's log refused.
    sign_checkpoint("t1")
    sign_checkpoint("t2")
    t2_size = len(events)
    note = call("GET", "/audit/checkpoint", "/audit/checkpoint").content.decode()
    assert "/keelgate/t2\n" in note and "/keelgate/t1" not in note
    listed = call("GET", "/audit/checkpoints", "/audit/checkpoints").json()["items"]
    assert all("/keelgate/t2\n" in c["note"] for c in listed)
    assert call("GET", "/audit/key", "/audit/key").json()["origin"].endswith("/keelgate/t2")
    beyond = {"seq": t1_events, "tree_size": t1_events}
    assert t1_events > t2_size
    assert call("GET", "/audit/proof/inclusion", "/audit/proof/inclusion", params=beyond).status_code == 422
    consistency = {"first": 1, "second": t1_events}
    assert (
        call("GET", "/audit/proof/consistency", "/audit/proof/consistency", params=consistency).status_code
        == 422
    )
    # The tlog-tiles prefix names its tenant: t1's is absent for t2's key, whatever the tile.
    absent(call("GET", "/audit/tlog/{tenant}/checkpoint", "/audit/tlog/t1/checkpoint"))
    absent(call("GET", "/audit/tlog/{tenant}/tile/{tile}", "/audit/tlog/t1/tile/0/000.p/1"))
    absent(call("GET", "/audit/tlog/{tenant}/tile/entries/{tile}", "/audit/tlog/t1/tile/entries/000.p/1"))
    assert other.get("/audit/tlog/t2/checkpoint").content.decode() == note
    assert other.get("/audit/tlog/t2/tile/entries/000.p/1").status_code == 200
    bundle = call("GET", "/audit/export", "/audit/export").json()
    assert bundle["tenant_id"] == "t2" and all(e["tenant_id"] == "t2" for e in bundle["events"])

    # t1's objects by id: absent.
    absent(call("GET", "/runs/{run_id}", "/runs/r1"))
    absent(call("GET", "/runs/{run_id}/checkpoints", "/runs/r1/checkpoints"))
    absent(call("POST", "/runs/{run_id}/resume", "/runs/r1/resume", {}))
    absent(call("POST", "/runs/{run_id}/cancel", "/runs/r1/cancel", {}))
    absent(call("GET", "/approvals/{approval_id}", f"/approvals/{pending.pk}"))
    absent(
        call(
            "POST",
            "/approvals/{approval_id}/approve",
            f"/approvals/{pending.pk}/approve",
            {"arguments_hash": pending.arguments_hash},
        )
    )
    absent(call("POST", "/approvals/{approval_id}/deny", f"/approvals/{pending.pk}/deny", {"note": "no"}))
    for verb, body in (("approve", {}), ("deny", {"note": "no"})):
        path = f"/approvals/bulk/{verb}"
        bulk = call(
            "POST",
            path,
            path,
            {"items": [{"id": pending.pk, "arguments_hash": pending.arguments_hash}], **body},
        )
        assert bulk.json() == {
            "results": [
                {
                    "approval_id": pending.pk,
                    "run_id": "",
                    "tool": "",
                    "status": "refused",
                    "code": "not_found",
                    "detail": "",
                }
            ]
        }
    absent(
        call(
            "POST",
            "/runs/{run_id}/actions/{action_id}/reconcile",
            f"/runs/u1/actions/{unknown.action_id}/reconcile",
            {"executed": False, "note": "not mine"},
        )
    )
    absent(call("POST", "/unknown-outcomes/{item_id}/check", f"/unknown-outcomes/{unknown.pk}/check"))
    # A digest of t1's chain proves nothing about t2's: refused, and t1's chain is not walked.
    foreign = call("POST", "/audit/verify", "/audit/verify", t1_digest)
    assert foreign.status_code == 422 and foreign.json()["code"] == "digest_invalid"

    # Standing rules: t2 lists none of t1's, cannot endorse or revoke one, and makes its own.
    assert call("GET", "/standing-approvals", "/standing-approvals").json()["items"] == []
    absent(call("POST", "/standing-approvals/{rule_id}/endorse", f"/standing-approvals/{t1_rule}/endorse"))
    absent(call("POST", "/standing-approvals/{rule_id}/revoke", f"/standing-approvals/{t1_rule}/revoke"))
    own = call("POST", "/standing-approvals", "/standing-approvals", rule)
    assert own.status_code == 200 and own.json()["id"] != t1_rule
    assert [r["id"] for r in client.get("/standing-approvals").json()["items"]] == [t1_rule]

    # Starting a run with t1's run id is a new run of t2's: the id's existence in t1 does not leak.
    started = call("POST", "/runs", "/runs", {"agent": "paper-trader", "goal": "buy 1 ACME", "run_id": "r1"})
    assert started.status_code == 201

    # Naming t1 explicitly with t2's key is 404 on every read.
    for path in [
        "/runs",
        "/approvals",
        "/unknown-outcomes",
        "/audit/events",
        "/audit/verify",
        "/audit/head",
        "/audit/checkpoint",
        "/audit/checkpoints",
        "/audit/key",
        "/audit/export",
        "/standing-approvals",
    ]:
        absent(other.get(path, {"tenant": "t1"}))

    assert covered == openapi_operations(client), "a new endpoint needs its tenant-isolation case here"
    # Nothing of t1's changed.
    assert Approval.objects.get(pk=pending.pk).status == ApprovalStatus.PENDING
    assert StandingApproval.objects.get(pk=t1_rule).revoked_at is None
    assert StandingApproval.objects.get(pk=t1_rule).maker_names == ["op"]
    assert not UnknownOutcome.objects.get(pk=unknown.pk).settled
    assert Run.objects.get(tenant_id="t1", run_id="r1").status == "waiting"
    assert AuditEvent.objects.filter(tenant_id="t1").count() == t1_events


def test_a_viewer_of_one_tenant_sees_only_that_tenant(api, keys, pending, pending_t2):
    """The t1 viewer's lists hold t1's objects only; t2's approval id is 404 for them."""
    viewer = api(keys.viewer)
    assert [r["run_id"] for r in viewer.get("/runs").json()["items"]] == ["r1"]
    assert [a["id"] for a in viewer.get("/approvals").json()["items"]] == [pending.pk]
    assert viewer.get(f"/approvals/{pending_t2.pk}").status_code == 404
