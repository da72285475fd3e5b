"""Edit, then approve, in the console: a form from the tool's schema, bound to what the page showed."""

from __future__ import annotations

import json

from approvals.models import Approval, ApprovalStatus
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run, RunStatus
from tests.site.console.conftest import drain, start_waiting

HTMX = {"HTTP_HX_REQUEST": "true"}


def edit(client, approval, **fields):
    body = {"edit": "1", "arguments_hash": approval.arguments_hash, "note": "smaller"}
    body.update({f"arg.{k}": v for k, v in fields.items()})
    return client.post(f"/approvals/{approval.pk}/approve/", body, **HTMX)


def test_the_card_offers_a_form_generated_from_the_tools_schema(people, brokerage_path, as_user):
    """symbol as text with its pattern, side as a choice, quantity as a number with its limits."""
    approval = start_waiting(people["op"], "e1")
    html = as_user("bob").get("/").content.decode()
    assert "Edit, then approve" in html
    assert 'name="arg.symbol" value="ACME"' in html and 'pattern="^[A-Z]{1,8}$"' in html
    assert f'<select id="item-a-{approval.pk}-arg-side" name="arg.side" required>' in html
    # quantity > 0 (exclusiveMinimum 0): the smallest whole number the input offers is 1
    assert 'name="arg.quantity" value="10"' in html and 'type="number" step="1" min="1" max="1000000"' in html
    assert f'name="arguments_hash" value="{approval.arguments_hash}"' in html
    assert "Edit, then approve" not in as_user("viewer").get("/").content.decode()


def test_an_edited_approval_places_the_edited_order_once(people, brokerage_path, as_user):
    """quantity 10 edited to 4: the brokerage fills 4 once; the original row is denied as edited."""
    approval = start_waiting(people["op"], "e2")
    response = edit(as_user("bob"), approval, symbol="ACME", side="buy", quantity="4")
    assert response.status_code == 200 and "with your edit" in response.content.decode()
    original = Approval.objects.get(pk=approval.pk)
    assert original.status == ApprovalStatus.DENIED and original.decided_by == "bob"
    assert original.replaced_by == f"{approval.action_id}.e1"
    edited = Approval.objects.get(run_id="e2", action_id=original.replaced_by)
    assert edited.status == ApprovalStatus.APPROVED and edited.edit_of == approval.action_id
    assert json.loads(edited.arguments)["quantity"] == 4
    drain()
    assert Run.objects.get(run_id="e2").status == RunStatus.DONE
    ledger = PaperBrokerage().ledger()
    assert [(e.quantity, e.executions) for e in ledger] == [(4, 1)]
    from runs.engine.stores import DjangoCheckpointStore

    answer = DjangoCheckpointStore().load("t1", "e2").final_answer
    assert answer.startswith("Bought 4 ACME at 101.5"), answer  # what was filled, not the goal's 10


def test_a_bad_edit_is_400_keeps_what_was_typed_and_changes_nothing(people, brokerage_path, as_user):
    """Text in a number field, or a value the schema refuses: 400 naming the field; still pending."""
    approval = start_waiting(people["op"], "e3")
    unreadable = edit(as_user("bob"), approval, symbol="ACME", side="buy", quantity="lots")
    assert unreadable.status_code == 400 and "quantity: a whole number" in unreadable.content.decode()
    assert 'value="lots"' in unreadable.content.decode()
    refused = edit(as_user("bob"), approval, symbol="acme!", side="buy", quantity="4")
    assert refused.status_code == 400 and "symbol" in refused.content.decode()
    assert 'value="acme!"' in refused.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert Approval.objects.filter(run_id="e3").count() == 1


def test_a_refused_edit_is_said_once_on_its_card_not_again_in_a_toast(people, brokerage_path, as_user):
    """quantity 0 where the schema says > 0: one message, on the card; no flash repeating it."""
    approval = start_waiting(people["op"], "e4")
    body = edit(as_user("bob"), approval, symbol="ACME", side="buy", quantity="0").content.decode()
    assert body.count("quantity: Input should be greater than 0") == 1, body
    assert 'class="flash' not in body


def test_a_stale_page_approving_after_someone_else_edited_gets_a_409_not_the_new_version(
    people, brokerage_path, as_user
):
    """bob edits; op's page still shows the original: op's approve is refused naming bob."""
    people["op"]
    approval = start_waiting(people["op"], "e4")
    assert edit(as_user("bob"), approval, symbol="ACME", side="buy", quantity="4").status_code == 200
    stale = as_user("op").post(
        f"/approvals/{approval.pk}/approve/", {"note": "", "arguments_hash": approval.arguments_hash}, **HTMX
    )
    assert stale.status_code == 409 and "Already settled by bob" in stale.content.decode()
    edited = Approval.objects.get(run_id="e4", edit_of=approval.action_id)
    assert [v["by"] for v in edited.votes] == ["bob"]


def test_an_approval_for_other_arguments_than_shown_is_refused(people, brokerage_path, as_user):
    """An arguments_hash that is not the call's: 409, nothing approved."""
    approval = start_waiting(people["op"], "e5")
    response = as_user("bob").post(
        f"/approvals/{approval.pk}/approve/", {"note": "", "arguments_hash": "0" * 64}, **HTMX
    )
    assert response.status_code == 409 and "changed since this page was loaded" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_the_loser_of_a_race_keeps_what_they_typed_with_the_reason(people, brokerage_path, as_user):
    """bob edited first; op's edit comes back 409 naming bob, with op's typed values still in the form."""
    approval = start_waiting(people["op"], "e6")
    assert edit(as_user("bob"), approval, symbol="ACME", side="buy", quantity="4").status_code == 200
    late = edit(as_user("op"), approval, symbol="ACME", side="buy", quantity="7")
    body = late.content.decode()
    assert late.status_code == 409 and "Already settled by bob" in body and "what you typed is below" in body
    assert 'name="arg.quantity" value="7"' in body
    denied = as_user("op").post(f"/approvals/{approval.pk}/deny/", {"note": "my long reason"}, **HTMX)
    assert denied.status_code == 409 and 'value="my long reason"' in denied.content.decode()


def test_a_second_person_approving_an_edited_call_under_four_eyes_is_told_plainly(
    people, brokerage_path, as_user, settings
):
    """bob edits (one of two votes); op approves the edited call: a plain approval, the order of 4 runs."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "four-eyes": "tests.site.console.agents.build_four_eyes",
    }
    approval = start_waiting(people["op"], "e7", agent="four-eyes")
    first = edit(as_user("bob"), approval, symbol="ACME", side="buy", quantity="4")
    assert first.status_code == 200 and "1 more approver needed" in first.content.decode()
    edited = Approval.objects.get(run_id="e7", edit_of=approval.action_id)
    assert edited.status == ApprovalStatus.PENDING
    second = as_user("op").post(
        f"/approvals/{edited.pk}/approve/", {"note": "", "arguments_hash": edited.arguments_hash}, **HTMX
    )
    body = second.content.decode()
    assert second.status_code == 200 and "the run is queued" in body and "with your edit" not in body
    drain()
    assert [(e.quantity, e.executions) for e in PaperBrokerage().ledger()] == [(4, 1)]


def test_the_inputs_bounds_follow_the_schema_exclusive_bounds_included():
    """An integer above an exclusive 0 starts at 1, below an exclusive 10 ends at 9; a number keeps it."""
    from approvals.edit_form import edit_fields

    schema = {
        "properties": {
            "whole": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
            "both": {"type": "integer", "minimum": 5, "exclusiveMinimum": 0},
            "price": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 2.5},
            "free": {"type": "integer"},
        }
    }
    bounds = {f.name: (f.minimum, f.maximum) for f in edit_fields(schema, {})}
    assert bounds == {"whole": ("1", "9"), "both": ("5", ""), "price": ("0.5", "2.5"), "free": ("", "")}
