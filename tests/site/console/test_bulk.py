"""Bulk decisions: each selected item its own attributed, audited decision; some are never bulk."""

from __future__ import annotations

import json

import pytest

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide, approvals_decide_bulk
from runs.agents.brokerage import PaperBrokerage
from tests.site._audit import logged

from .conftest import drain, start_waiting

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}


def picks(*approvals: Approval) -> list[str]:
    return [f"{a.pk}:{a.arguments_hash}" for a in approvals]


def decided_events(by: str) -> list[dict]:
    rows = logged().filter(tenant_id="t1", kind="approval.decided", actor=by).order_by("seq")
    return [json.loads(r.body) for r in rows]


@pytest.fixture
def three(people, brokerage_path):
    return [start_waiting(people["op"], f"b{i}") for i in range(3)]


def test_bulk_approve_decides_each_in_the_persons_name_and_each_order_fills_once(three, as_user):
    """Three cards, one click: three decisions by bob, three audit events, three orders, once each."""
    response = as_user("bob").post("/approvals/bulk/", {"decision": "approve", "ids": picks(*three)}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and "Approved 3 of 3." in body
    assert f'data-bulk-gone="{" ".join(f"item-a-{a.pk}" for a in three)}"' in body
    for a in three:
        assert Approval.objects.get(pk=a.pk).decided_by == "bob"
    assert sorted(e["run_id"] for e in decided_events("bob")) == ["b0", "b1", "b2"]
    drain()
    assert sorted(e.executions for e in PaperBrokerage().ledger()) == [1, 1, 1]


def test_one_failure_does_not_undo_the_others_and_each_is_listed(three, people, as_user):
    """An item someone else settled is refused by name; the rest go through."""
    approval_decide(tenant_id="t1", approval_id=three[1].pk, user=people["op"], decision="deny", note="no")
    response = as_user("bob").post(
        "/approvals/bulk/", {"decision": "deny", "note": "too late", "ids": picks(*three)}, **HTMX
    )
    body = response.content.decode()
    assert "Denied 2 of 3." in body
    assert "place_order in run b1: not decided: already settled by op" in body
    statuses = {a.run_id: Approval.objects.get(pk=a.pk) for a in three}
    assert [statuses[r].status for r in ("b0", "b1", "b2")] == ["denied", "denied", "denied"]
    assert [statuses[r].decided_by for r in ("b0", "b1", "b2")] == ["bob", "op", "bob"]
    assert f"item-a-{three[1].pk}" not in body.split("data-bulk-gone=")[1]


def test_high_impact_and_four_eyes_are_never_decided_in_bulk(people, brokerage_path, settings):
    """Both need a deliberate decision of their own: refused with bulk_not_allowed, left pending."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "four-eyes": "tests.site.console.agents.build_four_eyes",
    }
    big = start_waiting(people["op"], "big", goal="buy 500 ACME")
    assert big.high_impact
    pair = start_waiting(people["op"], "pair", agent="four-eyes")
    plain = start_waiting(people["op"], "plain")
    results = approvals_decide_bulk(
        tenant_ids=["t1"],
        choices={big.pk: big.arguments_hash, pair.pk: pair.arguments_hash, plain.pk: None},
        user=people["bob"],
        decision="approve",
    )
    assert [(r.run_id, r.status, r.code) for r in results] == [
        ("big", "refused", "bulk_not_allowed"),
        ("pair", "refused", "bulk_not_allowed"),
        ("plain", "approved", ""),
    ]
    assert Approval.objects.get(pk=big.pk).status == ApprovalStatus.PENDING
    assert Approval.objects.get(pk=pair.pk).votes == []


def test_a_stale_card_and_another_tenants_id_are_refused_not_applied(three, people, as_user):
    """The hash the person saw must still be the call's; ids of other tenants are not found."""
    stale = f"{three[0].pk}:{'0' * 64}"
    response = as_user("bob").post(
        "/approvals/bulk/", {"decision": "approve", "ids": [stale, "999999:", "nonsense"]}, **HTMX
    )
    body = response.content.decode()
    assert "Approved 0 of 2." in body and "the call changed since the page was loaded" in body
    assert "approval 999999: not decided: not found" in body
    assert Approval.objects.get(pk=three[0].pk).status == ApprovalStatus.PENDING
    eve = as_user("eve").post("/approvals/bulk/", {"decision": "approve", "ids": picks(three[1])}, **HTMX)
    assert "not found" in eve.content.decode()
    assert Approval.objects.get(pk=three[1].pk).status == ApprovalStatus.PENDING


def test_a_viewer_is_refused_for_each_item(three, as_user):
    """A role that may not decide decides nothing, item by item."""
    body = (
        as_user("viewer")
        .post("/approvals/bulk/", {"decision": "approve", "ids": picks(*three)}, **HTMX)
        .content.decode()
    )
    assert "Approved 0 of 3." in body and body.count("your role cannot decide it") == 3
    assert not Approval.objects.exclude(status=ApprovalStatus.PENDING).exists()


def test_deny_needs_a_reason_and_nothing_selected_is_said(three, as_user):
    """Input problems are 400 with words; nothing is decided."""
    client = as_user("bob")
    no_reason = client.post("/approvals/bulk/", {"decision": "deny", "ids": picks(*three)}, **HTMX)
    assert no_reason.status_code == 400 and "A reason is required" in no_reason.content.decode()
    empty = client.post("/approvals/bulk/", {"decision": "approve"}, **HTMX)
    assert empty.status_code == 400 and "Select at least one" in empty.content.decode()
    odd = client.post("/approvals/bulk/", {"decision": "maybe", "ids": picks(*three)}, **HTMX)
    assert odd.status_code == 400
    assert not Approval.objects.exclude(status=ApprovalStatus.PENDING).exists()


def test_without_javascript_the_bulk_form_redirects_back_with_the_result(three, as_user):
    """A plain post: 303 to the page it came from, the result as a message there."""
    client = as_user("bob")
    response = client.post(
        "/approvals/bulk/", {"decision": "approve", "ids": picks(*three), "next": "/?tool=place_order"}
    )
    assert response.status_code == 303 and response["Location"] == "/?tool=place_order"
    page = client.get(response["Location"]).content.decode()
    assert "Approved 3 of 3." in page
    evil = client.post(
        "/approvals/bulk/", {"decision": "approve", "ids": picks(three[0]), "next": "https://evil/"}
    )
    assert evil["Location"] == "/"
