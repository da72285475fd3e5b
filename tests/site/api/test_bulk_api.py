"""POST /approvals/bulk: each item its own decision; high-impact and four-eyes refused; tenant-bound."""

from __future__ import annotations

import pytest

from approvals.models import Approval, ApprovalStatus
from audit.models import AuditEvent

from .conftest import start_pending

pytestmark = pytest.mark.django_db(transaction=True)


def test_bulk_approve_lists_each_item_in_the_order_given(client, keys, brokerage_path):
    """Two orders approved by the key's user, each audited; an unknown id is refused as not found."""
    a = start_pending("t1", "op", run_id="a")
    b = start_pending("t1", "op", run_id="b")
    response = client.post(
        "/approvals/bulk",
        {
            "decision": "approve",
            "items": [{"id": a.pk, "arguments_hash": a.arguments_hash}, {"id": b.pk}, {"id": 999_999}],
        },
    )
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [(r["approval_id"], r["status"], r["code"]) for r in results] == [
        (a.pk, "approved", ""),
        (b.pk, "approved", ""),
        (999_999, "refused", "not_found"),
    ]
    actors = set(AuditEvent.objects.filter(kind="approval.decided").values_list("actor", flat=True))
    assert actors == {"op"}


def test_bulk_refuses_high_impact_and_another_tenants_items(client, keys, brokerage_path):
    """The high-impact order stays pending; t2's approval is invisible to a t1 key."""
    big = Approval.objects.get(pk=start_pending("t1", "op", run_id="big").pk)
    Approval.objects.filter(pk=big.pk).update(high_impact=True)
    theirs = start_pending("t2", "other", run_id="theirs")
    results = client.post(
        "/approvals/bulk", {"decision": "deny", "note": "no", "items": [{"id": big.pk}, {"id": theirs.pk}]}
    ).json()["results"]
    assert [(r["status"], r["code"]) for r in results] == [
        ("refused", "bulk_not_allowed"),
        ("refused", "not_found"),
    ]
    assert theirs.run_id not in str(results) and "place_order" not in results[1]["tool"]
    assert set(Approval.objects.values_list("status", flat=True)) == {ApprovalStatus.PENDING}


def test_bulk_input_is_checked_before_anything_is_decided(client, api, keys, brokerage_path):
    """A blank deny note, an empty or oversized list, a bad hash, a viewer: clear errors, nothing decided."""
    a = start_pending("t1", "op", run_id="a")
    blank = client.post("/approvals/bulk", {"decision": "deny", "items": [{"id": a.pk}]})
    assert blank.status_code == 422 and blank.json()["code"] == "note_required"
    for body in (
        {"decision": "approve", "items": []},
        {"decision": "approve", "items": [{"id": i} for i in range(1, 202)]},
        {"decision": "approve", "items": [{"id": a.pk, "arguments_hash": "x"}]},
        {"decision": "maybe", "items": [{"id": a.pk}]},
        {"decision": "approve", "items": [{"id": "1"}]},
    ):
        assert client.post("/approvals/bulk", body).status_code == 422, body
    viewer = api(keys.viewer).post("/approvals/bulk", {"decision": "approve", "items": [{"id": a.pk}]})
    assert viewer.status_code == 200 and viewer.json()["results"][0]["code"] == "forbidden"
    assert Approval.objects.get(pk=a.pk).status == ApprovalStatus.PENDING
