"""The approval card gives what a person needs to judge: goal, what was read, impact, risk, who decided."""

from __future__ import annotations

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from runs.models import Run, RunStatus
from tests.site.console.conftest import drain, start_waiting

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_the_card_shows_the_goal_the_quote_and_the_impact_in_plain_words(people, brokerage_path, as_user):
    """buy 10 ACME: the goal, the quote the agent read, and "≈ 1,015.00 USD at the last quote 101.50"."""
    approval = start_waiting(people["op"], "c1")
    assert approval.goal == "buy 10 ACME"
    assert approval.impact == "buy 10 ACME ≈ 1,015.00 USD at the last quote 101.50"
    assert approval.observations == [{"tool": "get_quote", "output": '{"price":101.5,"symbol":"ACME"}'}]
    assert approval.high_impact is False
    html = as_user("bob").get("/").content.decode()
    assert "<strong>Goal:</strong> buy 10 ACME" in html
    assert "buy 10 ACME ≈ 1,015.00 USD at the last quote 101.50" in html
    assert "What the agent had read (1)" in html and "&quot;price&quot;: 101.5" in html


def test_a_high_impact_order_is_highlighted_and_needs_a_typed_confirmation(people, brokerage_path, as_user):
    """999,999 GAMMA ≈ 7.25 M USD: marked high impact; approve without typing "approve" changes nothing."""
    approval = start_waiting(people["op"], "c2", goal="buy 999999 GAMMA")
    assert approval.high_impact is True
    assert approval.impact == "buy 999,999 GAMMA ≈ 7,249,992.75 USD at the last quote 7.25"
    client = as_user("bob")
    html = client.get("/").content.decode()
    assert "high-impact" in html and "data-approve-confirm" in html
    url = f"/approvals/{approval.pk}/approve/"
    shown = {"note": "", "arguments_hash": approval.arguments_hash}
    plain = client.post(url, shown, **HTMX)
    assert plain.status_code == 400 and "type approve" in plain.content.decode()
    wrong = client.post(
        url, {"note": "", "confirm": "yes", "arguments_hash": approval.arguments_hash}, **HTMX
    )
    assert wrong.status_code == 400
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    ok = client.post(
        url, {"note": "", "confirm": "Approve", "arguments_hash": approval.arguments_hash}, **HTMX
    )
    assert ok.status_code == 200
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED


def test_editing_a_small_order_into_a_high_impact_one_needs_the_confirmation_too(
    people, brokerage_path, as_user
):
    """The edit is assessed by the same policy: buy 10 ACME edited to 999,999 ACME is high impact."""
    approval = start_waiting(people["op"], "c3")
    client = as_user("bob")
    body = {"edit": "1", "arguments_hash": approval.arguments_hash, "note": ""}
    body.update({"arg.symbol": "ACME", "arg.side": "buy", "arg.quantity": "999999"})
    refused = client.post(f"/approvals/{approval.pk}/approve/", body, **HTMX)
    assert refused.status_code == 400 and Approval.objects.filter(run_id="c3").count() == 1
    confirmed = client.post(f"/approvals/{approval.pk}/approve/", {**body, "confirm": "approve"}, **HTMX)
    assert confirmed.status_code == 200
    edited = Approval.objects.get(run_id="c3", edit_of=approval.action_id)
    assert edited.high_impact is True and edited.status == ApprovalStatus.APPROVED


def test_the_api_needs_confirm_high_impact_for_a_high_impact_call(people, brokerage_path):
    """Through the service (the API's path): ConfirmationRequiredError unless confirmed."""
    import pytest

    from keelgate.errors import ConfirmationRequiredError

    approval = start_waiting(people["op"], "c4", goal="buy 999999 GAMMA")
    with pytest.raises(ConfirmationRequiredError):
        approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["bob"], decision="approve")
    approval_decide(
        tenant_id="t1", approval_id=approval.pk, user=people["bob"], decision="approve", confirmed=True
    )
    drain()
    assert Run.objects.get(run_id="c4").status == RunStatus.DONE


def test_the_inbox_says_who_decided_what_recently(people, brokerage_path, as_user):
    """A "Recently decided" section names the decision and the person in words."""
    approval = start_waiting(people["op"], "c5")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["bob"], decision="deny", note="no")
    html = as_user("op").get("/").content.decode()
    assert "Recently decided" in html
    assert "denied by <strong>bob</strong>" in html and "c5</a>" in html


def test_recently_decided_shows_the_note_and_an_edit_once(people, brokerage_path, as_user):
    """The person's note beside their decision; an edit-then-approve is one line, not two."""
    approval = start_waiting(people["op"], "c6")
    approval_decide(
        tenant_id="t1",
        approval_id=approval.pk,
        user=people["bob"],
        decision="approve",
        note="ten is too many",
        arguments={"symbol": "ACME", "side": "buy", "quantity": 4},
        seen=approval.arguments_hash,
    )
    recent = as_user("op").get("/").content.decode().split('id="inbox-recent"')[1].split("</section>")[0]
    assert recent.count("c6</a>") == 1, recent
    assert "edited, then approved by <strong>bob</strong>" in recent
    assert '<q class="note">ten is too many</q>' in recent
