"""M-of-N approvals in the console: three people in turn, the card's tally, a denial by any
one ending it, the same person twice, roles that count, and bulk refusing them."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from approvals.models import Approval, ApprovalStatus
from approvals.services import approvals_decide_bulk
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run, RunStatus
from tenants.models import Membership, Role, Tenant
from tests.site._audit import logged

from .conftest import PASSWORD, drain, start_waiting

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def m_of_n(people, brokerage_path, settings):
    """The three-of-n and admins-only agents, and cal, a third approver of t1."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "three-of-n": "tests.site.console.agents.build_three_of_n",
        "admins-only": "tests.site.console.agents.build_admins_only",
    }
    cal = get_user_model().objects.create_user("cal", password=PASSWORD)
    Membership.objects.create(user=cal, tenant=Tenant.objects.get(slug="t1"), role=Role.APPROVER)
    people["cal"] = cal  # as_user reads this very mapping
    return people


def card(client, pk: int) -> str:
    """The inbox page as ``client`` sees it, cut to the approval's card."""
    page = client.get("/").content.decode()
    start = page.index(f'id="item-a-{pk}"')
    return page[start : page.index("</article>", start)]


def test_three_people_approve_in_turn_the_card_counts_and_the_order_runs_once(m_of_n, as_user):
    """0, 1, 2 of 3 approved with names and what remains; the third approval queues the run."""
    approval = start_waiting(m_of_n["op"], "m1", agent="three-of-n")
    assert approval.required == 3
    before = card(as_user("bob"), approval.pk)
    assert "3 people:" in before and "0 of 3 approved; 3 more needed." in before
    assert "a denial by any one of them ends it" in before
    assert 'class="bulk-pick muted">Decide on its own' in before

    first = as_user("op").post(f"/approvals/{approval.pk}/approve/", {"note": "looks right"}, **HTMX)
    assert first.status_code == 200 and "2 more approvers needed" in first.content.decode()
    assert "You approved this. 2 more people must approve it too." in first.content.decode()
    second = as_user("bob").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    assert second.status_code == 200 and "1 more approver needed" in second.content.decode()
    tally = card(as_user("cal"), approval.pk)
    voters = '<span class="voter">op</span> (“looks right”), <span class="voter">bob</span>'
    assert f"2 of 3 approved: {voters}" in tally
    assert "; 1 more needed." in tally
    assert Run.objects.get(run_id="m1").status == RunStatus.WAITING

    third = as_user("cal").post(f"/approvals/{approval.pk}/approve/", {})
    assert third.status_code == 303
    row = Approval.objects.get(pk=approval.pk)
    assert row.status == ApprovalStatus.APPROVED and row.approved_by == ["op", "bob", "cal"]
    assert row.decided_by == "cal" and row.remaining == 0
    decided = logged().filter(kind="approval.decided", run_id="m1").order_by("seq")
    bodies = [(e.actor, json.loads(e.body)) for e in decided]
    assert [(actor, body["approvals"], body["required"]) for actor, body in bodies] == [
        ("op", 1, 3),
        ("bob", 2, 3),
        ("cal", 3, 3),
    ]
    drain()
    assert Run.objects.get(run_id="m1").status == RunStatus.DONE
    orders = PaperBrokerage().ledger()
    assert [(o.executions, o.replays) for o in orders] == [(1, 0)]


def test_the_same_person_twice_counts_once_and_is_told_so(m_of_n, as_user):
    """op's second approval is refused (409, in words) and leaves one vote of op's."""
    approval = start_waiting(m_of_n["op"], "m2", agent="three-of-n")
    as_user("op").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    again = as_user("op").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    assert again.status_code == 409
    assert "You already approved this: a different person must approve it too." in again.content.decode()
    row = Approval.objects.get(pk=approval.pk)
    assert row.approved_by == ["op"] and row.remaining == 2 and row.status == ApprovalStatus.PENDING


def test_a_denial_by_any_one_ends_it_after_two_approvals(m_of_n, as_user):
    """Two approved, the third denies: denied, the run reads the denial, no order is placed."""
    approval = start_waiting(m_of_n["op"], "m3", agent="three-of-n")
    as_user("op").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    as_user("bob").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    denied = as_user("cal").post(f"/approvals/{approval.pk}/deny/", {"note": "not this week"})
    assert denied.status_code == 303
    row = Approval.objects.get(pk=approval.pk)
    assert row.status == ApprovalStatus.DENIED and row.decided_by == "cal"
    late = as_user("rita").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    assert late.status_code == 409 and "Already settled by cal." in late.content.decode()
    drain()
    assert PaperBrokerage().ledger() == []


def test_only_the_named_roles_count(m_of_n, as_user):
    """admins-only: an approver sees why and has no buttons, and is refused (403) if they post."""
    approval = start_waiting(m_of_n["op"], "m4", agent="admins-only")
    assert approval.approver_roles == ["admin"]
    bob_card = card(as_user("bob"), approval.pk)
    assert "Deciding it takes the admin role (or above) in t1." in bob_card
    assert f"/approvals/{approval.pk}/approve/" not in bob_card
    assert "Only a decision by someone with the admin role (or above) in t1 counts." in bob_card
    refused = as_user("bob").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    assert refused.status_code == 403
    denied = as_user("bob").post(f"/approvals/{approval.pk}/deny/", {"note": "no"}, **HTMX)
    assert denied.status_code == 403
    row = Approval.objects.get(pk=approval.pk)
    assert row.votes == [] and row.status == ApprovalStatus.PENDING
    assert f"/approvals/{approval.pk}/approve/" in card(as_user("op"), approval.pk)
    as_user("op").post(f"/approvals/{approval.pk}/approve/", {}, **HTMX)
    assert Approval.objects.get(pk=approval.pk).approved_by == ["op"]


def test_bulk_refuses_an_m_of_n_item_saying_why(m_of_n, as_user):
    """Each M > 1 item refused with a reason naming M; its votes untouched; the console lists it."""
    three = start_waiting(m_of_n["op"], "m5", agent="three-of-n")
    plain = start_waiting(m_of_n["op"], "m6")
    results = approvals_decide_bulk(
        tenant_ids=["t1"],
        choices={three.pk: three.arguments_hash, plain.pk: plain.arguments_hash},
        user=m_of_n["bob"],
        decision="approve",
    )
    assert [(r.run_id, r.status, r.code) for r in results] == [
        ("m5", "refused", "bulk_not_allowed"),
        ("m6", "approved", ""),
    ]
    assert "needs 3 different people" in results[0].detail
    assert Approval.objects.get(pk=three.pk).votes == []
    other = start_waiting(m_of_n["op"], "m7", agent="three-of-n")
    page = as_user("cal").post(
        "/approvals/bulk/", {"decision": "approve", "ids": [f"{other.pk}:{other.arguments_hash}"]}, **HTMX
    )
    assert "needs 3 different people to approve it, each deciding it on its own" in page.content.decode()
