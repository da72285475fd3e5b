"""The standing approvals API: list, create, endorse, revoke; tenant-scoped; stable error codes."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalStatus, StandingApproval

from .conftest import start_pending

pytestmark = pytest.mark.django_db(transaction=True)

RULE = {
    "agent": "paper-trader",
    "tool": "place_order",
    "bounds": {"quantity": {"max": 10}, "symbol": {"equals": "ACME"}},
    "expires_in_days": 7,
    "note": "routine top-ups",
}


def test_a_rule_made_over_the_api_approves_the_next_matching_call(client, brokerage_path):
    """Created (live, made by op), listed, used by the next run, then revoked: uses 1."""
    made = client.post("/standing-approvals", RULE)
    assert made.status_code == 200, made.content
    body = made.json()
    assert (body["makers"], body["live"], body["uses"], body["bounds"]["quantity"]) == (
        ["op"],
        True,
        0,
        {"max": 10},
    )
    assert start_pending("t1", "op", run_id="s1").status == ApprovalStatus.APPROVED
    listed = client.get("/standing-approvals").json()["items"]
    assert [(r["id"], r["uses"]) for r in listed] == [(body["id"], 1)]
    revoked = client.post(f"/standing-approvals/{body['id']}/revoke", {"note": "done"})
    assert revoked.status_code == 200 and revoked.json()["live"] is False
    assert revoked.json()["revoked_by"] == "op"
    assert start_pending("t1", "op", run_id="s2").status == ApprovalStatus.PENDING


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"bounds": {"qty": {"max": 10}}}, "bounds.qty"),
        ({"bounds": {"quantity": {"min": 11, "max": 10}}}, "bounds.quantity"),
        ({"expires_in_days": 31}, "expires_in_days"),
        ({"tool": "no_such_tool"}, "tool"),
        ({"agent": "no-such-agent"}, "agent"),
        ({"bounds": None, "exact_arguments": {"symbol": "ACME"}}, "exact_arguments"),
        (
            {"bounds": None, "exact_arguments": {"symbol": "AC\x00ME", "side": "buy", "quantity": 1}},
            "exact_arguments",
        ),
        ({"bounds": {"symbol": {"equals": "A\x00"}}}, "bounds.symbol"),
    ],
)
def test_an_impossible_rule_is_a_422_naming_the_field(client, change, field):
    """standing_rule_invalid, its detail naming the field; nothing stored."""
    response = client.post("/standing-approvals", {**RULE, **change})
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "standing_rule_invalid"
    assert f"({field}" in response.json()["detail"]
    assert not StandingApproval.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {k: v for k, v in RULE.items() if k != "expires_in_days"},
        {**RULE, "expires_in_days": "7"},
        {**RULE, "bounds": {"quantity": {"max": 10, "extra": 1}}},
        {**RULE, "surprise": True},
        {**RULE, "required": 0},
    ],
)
def test_malformed_input_is_a_422_never_a_500(client, body):
    """A missing expiry, a string for a number, unknown keys, a zero M: 422, nothing stored."""
    response = client.post("/standing-approvals", body)
    assert response.status_code == 422, response.content
    assert not StandingApproval.objects.exists()


def test_rules_are_tenant_scoped_and_revoking_takes_an_admin(client, api, keys, brokerage_path):
    """t2 sees none of t1's rules and cannot revoke one (404); a viewer cannot make or revoke (403)."""
    rule_id = client.post("/standing-approvals", RULE).json()["id"]
    assert api(keys.t2).get("/standing-approvals").json()["items"] == []
    other = api(keys.t2).post(f"/standing-approvals/{rule_id}/revoke")
    assert other.status_code == 404
    viewer = api(keys.viewer)
    assert viewer.post("/standing-approvals", RULE).status_code == 403
    assert viewer.post(f"/standing-approvals/{rule_id}/revoke").status_code == 403
    assert StandingApproval.objects.get(pk=rule_id).revoked_at is None


def test_a_rule_for_several_makers_is_endorsed_once_each(client, brokerage_path):
    """required 2: not live until a second person endorses; the maker endorsing again is 409."""
    rule_id = client.post("/standing-approvals", {**RULE, "required": 2}).json()["id"]
    assert client.get("/standing-approvals").json()["items"][0]["live"] is False
    again = client.post(f"/standing-approvals/{rule_id}/endorse")
    assert again.status_code == 409 and again.json()["code"] == "approval_duplicate_approver"
    assert client.post("/standing-approvals/999999/endorse").status_code == 404
