"""M-of-N over the API: the approval says who approved and how many remain; bulk says why not."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from approvals.models import Approval
from runs.agents.brokerage import PaperBrokerage
from runs.services import run_start
from tenants.models import Membership, Role, Tenant
from tests.site._keys import key_row

from .conftest import Api, drain

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def three(keys, brokerage_path, settings) -> Approval:
    """A three-of-n run of t1 waiting for its order's approval."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "three-of-n": "tests.site.console.agents.build_three_of_n",
    }
    op = get_user_model().objects.get(username="op")
    run_start(tenant_id="t1", agent="three-of-n", goal="buy 10 ACME", user=op, run_id="m1")
    drain()
    return Approval.objects.get(tenant_id="t1", run_id="m1")


def approver_key(name: str) -> Api:
    """A client for a new approver of t1."""
    user = get_user_model().objects.create_user(name)
    tenant = Tenant.objects.get(slug="t1")
    Membership.objects.create(user=user, tenant=tenant, role=Role.APPROVER)
    return Api(key_row(tenant=tenant, user=user, name=name))


def test_the_approval_shows_who_approved_and_how_many_remain(client, three):
    """remaining counts down 3, 2, 1 as op, ann and bob approve; the third runs the order once."""
    shown = client.get(f"/approvals/{three.pk}").json()
    assert (shown["required"], shown["approved_by"], shown["remaining"]) == (3, [], 3)
    assert shown["approver_roles"] == []
    body = {"arguments_hash": three.arguments_hash}
    assert client.post(f"/approvals/{three.pk}/approve", body).json()["remaining"] == 2
    again = client.post(f"/approvals/{three.pk}/approve", body)
    assert again.status_code == 409 and again.json()["code"] == "approval_duplicate_approver"
    ann = approver_key("ann").post(f"/approvals/{three.pk}/approve", body).json()
    assert (ann["status"], ann["approved_by"], ann["remaining"]) == ("pending", ["op", "ann"], 1)
    bob = approver_key("bob").post(f"/approvals/{three.pk}/approve", body).json()
    assert (bob["status"], bob["approved_by"], bob["remaining"]) == ("approved", ["op", "ann", "bob"], 0)
    drain()
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]


def test_bulk_refuses_an_m_of_n_item_with_its_reason(client, three):
    """bulk_not_allowed with a detail naming how many people it needs; nothing recorded."""
    results = client.post(
        "/approvals/bulk/approve", {"items": [{"id": three.pk, "arguments_hash": three.arguments_hash}]}
    ).json()["results"]
    assert [(r["status"], r["code"]) for r in results] == [("refused", "bulk_not_allowed")]
    assert "needs 3 different people" in results[0]["detail"]
    assert Approval.objects.get(pk=three.pk).votes == []
