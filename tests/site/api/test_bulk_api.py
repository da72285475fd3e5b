"""POST /approvals/bulk: each item its own decision; high-impact and four-eyes refused; tenant-bound."""

from __future__ import annotations

import pytest

from approvals.models import Approval, ApprovalStatus
from tests.site._audit import logged

from .conftest import start_pending

pytestmark = pytest.mark.django_db(transaction=True)


def test_bulk_approve_lists_each_item_in_the_order_given(client, keys, brokerage_path):
    """Two orders approved by the key's user, each audited; an unknown id is refused as not found."""
    a = start_pending("t1", "op", run_id="a")
    b = start_pending("t1", "op", run_id="b")
    response = client.post(
        "/approvals/bulk/approve",
        {
            "items": [
                {"id": a.pk, "arguments_hash": a.arguments_hash},
                {"id": b.pk, "arguments_hash": b.arguments_hash},
                {"id": 999_999, "arguments_hash": "0" * 64},
            ],
        },
    )
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [(r["approval_id"], r["status"], r["code"]) for r in results] == [
        (a.pk, "approved", ""),
        (b.pk, "approved", ""),
        (999_999, "refused", "not_found"),
    ]
    actors = set(logged().filter(kind="approval.decided").values_list("actor", flat=True))
    assert actors == {"op"}


def test_bulk_refuses_high_impact_and_another_tenants_items(client, keys, brokerage_path):
    """The high-impact order stays pending; t2's approval is invisible to a t1 key."""
    big = Approval.objects.get(pk=start_pending("t1", "op", run_id="big").pk)
    Approval.objects.filter(pk=big.pk).update(high_impact=True)
    theirs = start_pending("t2", "other", run_id="theirs")
    results = client.post(
        "/approvals/bulk/deny", {"note": "no", "items": [{"id": big.pk}, {"id": theirs.pk}]}
    ).json()["results"]
    assert [(r["status"], r["code"]) for r in results] == [
        ("refused", "bulk_not_allowed"),
        ("refused", "not_found"),
    ]
    assert theirs.run_id not in str(results) and "place_order" not in results[1]["tool"]
    assert set(Approval.objects.values_list("status", flat=True)) == {ApprovalStatus.PENDING}


def test_bulk_input_is_checked_before_anything_is_decided(client, api, keys, brokerage_path):
    """No or a blank deny note, an empty or long list, a bad hash, a stray field: 422; a viewer: refused."""
    a = start_pending("t1", "op", run_id="a")
    for path, body in (
        ("deny", {"items": [{"id": a.pk}]}),
        ("deny", {"items": [{"id": a.pk}], "note": "  "}),
        ("approve", {"items": []}),
        ("approve", {"items": [{"id": i} for i in range(1, 202)]}),
        ("approve", {"items": [{"id": a.pk, "arguments_hash": "x"}]}),
        ("approve", {"items": [{"id": a.pk}], "decision": "deny"}),
        ("approve", {"items": [{"id": "1"}]}),
    ):
        assert client.post(f"/approvals/bulk/{path}", body).status_code == 422, body
    viewer = api(keys.viewer).post(
        "/approvals/bulk/approve", {"items": [{"id": a.pk, "arguments_hash": a.arguments_hash}]}
    )
    assert viewer.status_code == 200 and viewer.json()["results"][0]["code"] == "forbidden"
    assert Approval.objects.get(pk=a.pk).status == ApprovalStatus.PENDING
