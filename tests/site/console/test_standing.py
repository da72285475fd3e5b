"""Standing approvals: a rule approves the calls it matches when their run stops for them,
audited by rule and maker; never high impact, never past expiry or revocation, never for an
M-of-N call with fewer makers than M; impossible rules refused naming the field; a revoke
racing a use: one wins."""

from __future__ import annotations

import functools
import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, StandingApproval
from approvals.standing import (
    standing_apply,
    standing_create,
    standing_edit,
    standing_endorse,
    standing_revoke,
)
from audit.selectors import audit_verify
from keelgate.errors import DuplicateApproverError
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run, RunStatus
from sitekit.errors import ForbiddenError, StandingRuleEndedError, StandingRuleInvalidError
from tenants.models import Membership, Role, Tenant
from tests.site._audit import logged
from tests.site._threads import at_once

from .conftest import PASSWORD, start_waiting

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def folks(people, brokerage_path, settings):
    """The console's people, cal (a third approver), and the three-of-n agent."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "three-of-n": "tests.site.console.agents.build_three_of_n",
    }
    cal = get_user_model().objects.create_user("cal", password=PASSWORD)
    Membership.objects.create(user=cal, tenant=Tenant.objects.get(slug="t1"), role=Role.APPROVER)
    people["cal"] = cal
    return people


def rule(user, *, agent="paper-trader", days=7.0, **kwargs) -> StandingApproval:
    kwargs.setdefault("bounds", {"quantity": {"max": 10}, "symbol": {"equals": "ACME"}})
    return standing_create(
        tenant_id="t1",
        user=user,
        agent=agent,
        tool="place_order",
        expires_at=timezone.now() + timedelta(days=days),
        **kwargs,
    )


def events(kind: str) -> list[tuple[str, dict]]:
    return [(e.actor, json.loads(e.body)) for e in logged().filter(kind=kind).order_by("seq")]


def test_a_live_rule_approves_a_matching_call_once_audited_by_rule_and_maker(folks):
    """bob's rule (quantity <= 10 of ACME): the run stops, the rule approves, the order runs once."""
    made = rule(folks["bob"], note="routine top-ups")
    approval = start_waiting(folks["op"], "s1")
    row = Approval.objects.get(pk=approval.pk)
    assert row.status == ApprovalStatus.APPROVED and row.approved_by == ["bob"]
    assert row.votes[0]["note"] == f"standing rule #{made.pk}"
    assert Run.objects.get(run_id="s1").status == RunStatus.DONE
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]
    used = events("approval.standing_used")
    assert [(actor, body["rule_id"], body["made_by"], body["run_id"]) for actor, body in used] == [
        ("bob", made.pk, ["bob"], "s1")
    ]
    decided = events("approval.decided")
    assert [(a, b["via"], b["note"]) for a, b in decided] == [
        ("bob", "standing", f"standing rule #{made.pk}")
    ]
    created = events("approval.standing_created")
    assert created[0][0] == "bob" and created[0][1]["bounds"]["quantity"] == {"max": 10}
    assert StandingApproval.objects.get(pk=made.pk).uses == 1
    assert audit_verify(tenant_id="t1").ok


def test_a_call_outside_the_constraints_waits_for_a_person(folks):
    """quantity 20 is above the rule's max; another symbol is not its equals: both wait."""
    rule(folks["bob"])
    assert start_waiting(folks["op"], "s2", goal="buy 20 ACME").status == ApprovalStatus.PENDING
    assert start_waiting(folks["op"], "s3", goal="buy 5 GAMMA").status == ApprovalStatus.PENDING
    assert events("approval.standing_used") == []


def test_exact_arguments_match_only_those_arguments(folks):
    """A rule for exactly one call's arguments approves that call and not a neighbour."""
    rule(folks["bob"], bounds=None, exact_arguments={"symbol": "ACME", "side": "buy", "quantity": 10})
    assert Approval.objects.get(pk=start_waiting(folks["op"], "s4").pk).status == ApprovalStatus.APPROVED
    assert start_waiting(folks["op"], "s5", goal="buy 9 ACME").status == ApprovalStatus.PENDING


def test_never_after_revocation_or_expiry_nor_for_a_high_impact_call(folks):
    """Revoked, expired, or the call high impact: the rule approves nothing."""
    revoked = rule(folks["bob"])
    standing_revoke(tenant_id="t1", rule_id=revoked.pk, user=folks["op"], note="enough")
    assert start_waiting(folks["op"], "s6").status == ApprovalStatus.PENDING
    expired = rule(folks["bob"])
    StandingApproval.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert start_waiting(folks["op"], "s7").status == ApprovalStatus.PENDING
    rule(folks["bob"], bounds={"quantity": {"max": 1000}})
    big = start_waiting(folks["op"], "s8", goal="buy 500 ACME")
    assert big.high_impact and big.status == ApprovalStatus.PENDING
    assert standing_apply(tenant_id="t1", approval_id=big.pk) is None
    assert events("approval.standing_used") == []
    assert [b["uses"] for _, b in events("approval.standing_revoked")] == [0]


def test_an_m_of_n_call_needs_a_rule_made_by_m_people(folks):
    """M = 3: a rule of one maker never approves it; one needing 3 is live after two endorsements,
    then records the three makers' approvals."""
    rule(folks["bob"], agent="three-of-n")  # required 1: never enough for M = 3
    assert start_waiting(folks["op"], "s9", agent="three-of-n").status == ApprovalStatus.PENDING
    three = rule(folks["bob"], agent="three-of-n", required=3)
    assert start_waiting(folks["op"], "s10", agent="three-of-n").status == ApprovalStatus.PENDING
    standing_endorse(tenant_id="t1", rule_id=three.pk, user=folks["cal"])
    with pytest.raises(DuplicateApproverError):
        standing_endorse(tenant_id="t1", rule_id=three.pk, user=folks["cal"])
    standing_endorse(tenant_id="t1", rule_id=three.pk, user=folks["op"])
    row = Approval.objects.get(pk=start_waiting(folks["op"], "s11", agent="three-of-n").pk)
    assert row.status == ApprovalStatus.APPROVED and row.approved_by == ["bob", "cal", "op"]
    assert [b["made_by"] for _, b in events("approval.standing_used")] == [["bob", "cal", "op"]]
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bounds": {"qty": {"max": 10}}}, "bounds.qty"),
        ({"bounds": {"quantity": {"min": 20, "max": 10}}}, "bounds.quantity"),
        ({"bounds": {"quantity": {"max": "ten"}}}, "bounds.quantity.max"),
        ({"bounds": {"symbol": {"max": 3}}}, "bounds.symbol.max"),
        ({"bounds": {"quantity": {"below": 3}}}, "bounds.quantity"),
        ({"bounds": {}}, "bounds"),
        (
            {"bounds": None, "exact_arguments": {"symbol": "ACME", "side": "buy", "quantity": "10"}},
            "exact_arguments",
        ),
        ({"days": 31}, "expires_at"),
        ({"days": -1}, "expires_at"),
        ({"required": 0}, "required"),
    ],
)
def test_an_impossible_rule_is_refused_naming_the_field(folks, kwargs, field):
    """Each is StandingRuleInvalidError (422) whose detail starts with the field; nothing is made."""
    with pytest.raises(StandingRuleInvalidError) as caught:
        rule(folks["bob"], **kwargs)
    assert caught.value.http_status == 422 and caught.value.detail.startswith(f"{field}")
    assert not StandingApproval.objects.exists() and events("approval.standing_created") == []


def test_admins_narrow_a_rule_but_never_widen_it_and_viewers_make_none(folks):
    """An earlier expiry and a lower max are taken; a later expiry or a higher max are refused."""
    made = rule(folks["bob"])
    with pytest.raises(ForbiddenError):
        standing_edit(tenant_id="t1", rule_id=made.pk, user=folks["bob"], bounds={"quantity": {"max": 5}})
    with pytest.raises(ForbiddenError):
        rule(folks["viewer"])
    sooner = timezone.now() + timedelta(days=1)
    narrowed = standing_edit(
        tenant_id="t1",
        rule_id=made.pk,
        user=folks["op"],
        expires_at=sooner,
        bounds={"quantity": {"max": 5}, "symbol": {"equals": "ACME"}},
    )
    assert narrowed.bounds["quantity"] == {"max": 5} and narrowed.expires_at == sooner
    with pytest.raises(StandingRuleInvalidError, match="max"):
        standing_edit(
            tenant_id="t1",
            rule_id=made.pk,
            user=folks["op"],
            bounds={"quantity": {"max": 6}, "symbol": {"equals": "ACME"}},
        )
    with pytest.raises(StandingRuleInvalidError, match="expires_at"):
        standing_edit(
            tenant_id="t1", rule_id=made.pk, user=folks["op"], expires_at=sooner + timedelta(days=1)
        )
    with pytest.raises(StandingRuleInvalidError, match=r"bounds\.symbol"):
        standing_edit(tenant_id="t1", rule_id=made.pk, user=folks["op"], bounds={"quantity": {"max": 5}})
    assert len(events("approval.standing_edited")) == 1
    standing_revoke(tenant_id="t1", rule_id=made.pk, user=folks["op"])
    with pytest.raises(StandingRuleEndedError):
        standing_edit(tenant_id="t1", rule_id=made.pk, user=folks["op"], expires_at=sooner)
    standing_revoke(tenant_id="t1", rule_id=made.pk, user=folks["op"])  # idempotent
    assert len(events("approval.standing_revoked")) == 1


@pytest.mark.parametrize("round_", range(3))
def test_a_revoke_racing_a_use_one_wins(folks, round_):
    """Two threads, one applying the rule to a waiting call, one revoking it: either the call
    was approved before the revoke (one use, used before revoked in the chain) or not at all."""
    approval = start_waiting(folks["op"], f"race{round_}")
    made = rule(folks["bob"])  # made after the call stopped: only the racing apply can use it
    outcomes = at_once(
        [
            functools.partial(standing_apply, tenant_id="t1", approval_id=approval.pk),
            functools.partial(standing_revoke, tenant_id="t1", rule_id=made.pk, user=folks["op"]),
        ],
        timeout=120,
    )
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    row = Approval.objects.get(pk=approval.pk)
    stored = StandingApproval.objects.get(pk=made.pk)
    assert stored.revoked_at is not None
    used = logged().filter(kind="approval.standing_used").values_list("seq", flat=True)
    revoked = logged().filter(kind="approval.standing_revoked").values_list("seq", flat=True)
    if outcomes[0] is None:
        assert row.status == ApprovalStatus.PENDING and stored.uses == 0 and list(used) == []
    else:
        assert row.status == ApprovalStatus.APPROVED and stored.uses == 1
        assert len(used) == 1 and used[0] < revoked[0]
        assert json.loads(logged().get(kind="approval.standing_revoked").body)["uses"] == 1
    assert audit_verify(tenant_id="t1").ok


HTMX = {"HTTP_HX_REQUEST": "true"}
FROM_NOW_ON = {
    "standing": "1",
    "standing_match": "bounds",
    "standing_max_quantity": "10",
    "standing_eq_symbol": "1",
    "standing_eq_side": "1",
    "standing_days": "7",
}


def test_the_card_approves_and_makes_a_rule_that_approves_the_next_call(folks, as_user):
    """bob ticks "and from now on" with quantity <= 10: approved, rule made, the next order needs nobody."""
    approval = start_waiting(folks["op"], "c1")
    page = as_user("bob").get("/").content.decode()
    assert "…and approve the same from now on" in page and 'name="standing_max_quantity"' in page
    response = as_user("bob").post(f"/approvals/{approval.pk}/approve/", {"note": "", **FROM_NOW_ON}, **HTMX)
    assert response.status_code == 200, response.content
    made = StandingApproval.objects.get()
    assert "From now on, standing rule #" in response.content.decode()
    assert made.bounds == {"quantity": {"max": 10}, "symbol": {"equals": "ACME"}, "side": {"equals": "buy"}}
    assert made.maker_names == ["bob"] and made.source_approval == approval.pk
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
    assert Approval.objects.get(pk=start_waiting(folks["op"], "c2", goal="buy 8 ACME").pk).approved_by == [
        "bob"
    ]


def test_an_impossible_rule_on_the_card_records_no_approval(folks, as_user):
    """A 31-day rule is refused naming the field, and the approval is not recorded either."""
    approval = start_waiting(folks["op"], "c3")
    response = as_user("bob").post(
        f"/approvals/{approval.pk}/approve/", {**FROM_NOW_ON, "standing_days": "31"}, **HTMX
    )
    assert (
        response.status_code == 400 and "(standing_days: at most 30 days ahead)" in response.content.decode()
    )
    assert Approval.objects.get(pk=approval.pk).votes == [] and not StandingApproval.objects.exists()


def test_the_page_lets_admins_narrow_and_revoke_and_others_only_look(folks, as_user):
    """op sees Narrow and Revoke; bob sees the rule without them and is refused if he posts."""
    made = rule(folks["bob"], note="<b>top-ups</b>")
    admin_page = as_user("op").get("/approvals/standing/").content.decode()
    assert f"Revoke #{made.pk}" in admin_page and f"Narrow #{made.pk}" in admin_page
    assert "&lt;b&gt;top-ups&lt;/b&gt;" in admin_page
    bob_page = as_user("bob").get("/approvals/standing/").content.decode()
    assert f'id="rule-{made.pk}"' in bob_page and f"Revoke #{made.pk}" not in bob_page
    assert as_user("bob").post(f"/approvals/standing/{made.pk}/revoke/").status_code == 403
    assert as_user("eve").post(f"/approvals/standing/{made.pk}/revoke/").status_code == 404
    narrowed = as_user("op").post(f"/approvals/standing/{made.pk}/edit/", {"max_quantity": "4"})
    assert narrowed.status_code == 303
    assert StandingApproval.objects.get(pk=made.pk).bounds["quantity"] == {"max": 4}
    wider = as_user("op").post(f"/approvals/standing/{made.pk}/edit/", {"max_quantity": "40"}, follow=True)
    assert "an edit may only lower max" in wider.content.decode()
    revoked = as_user("op").post(f"/approvals/standing/{made.pk}/revoke/", {"note": "enough"}, follow=True)
    assert f"Standing rule #{made.pk} revoked" in revoked.content.decode()
    assert StandingApproval.objects.get(pk=made.pk).revoked_by == "op"


def test_a_failure_applying_the_rules_leaves_the_call_to_people(folks, monkeypatch, caplog):
    """Fail closed: the rules cannot be read (the database went away): the call waits, the worker goes on."""
    from django.db import DatabaseError

    import approvals.receivers

    def broken(**kwargs: object) -> int:
        raise DatabaseError("the database went away")

    rule(folks["bob"])
    monkeypatch.setattr(approvals.receivers, "standing_apply_run", broken)
    approval = start_waiting(folks["op"], "f1")
    assert approval.status == ApprovalStatus.PENDING
    assert Run.objects.get(run_id="f1").status == RunStatus.WAITING
    assert "standing approval rules not applied to run f1" in caplog.text
