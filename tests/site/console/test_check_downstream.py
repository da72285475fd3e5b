"""'Check the brokerage' on an unknown outcome: trusted lookup code, on the server, with a timeout."""

from __future__ import annotations

import json

import pytest

from approvals.models import Approval, UnknownOutcome
from approvals.services import approval_decide
from audit.wiring import audit_log
from runs.agents import lookups
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Run, RunStatus
from tests.site.console.conftest import drain, start_waiting

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def agents(settings):
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "auto-settle": "tests.site.console.agents.build_auto_settle",
        "hanging-lookup": "tests.site.console.agents.build_hanging_lookup",
        "broken-lookup": "tests.site.console.agents.build_broken_lookup",
    }


def make_unknown(op, run_id: str, agent: str = "paper-trader") -> UnknownOutcome:
    """An order whose outcome nobody knows: the brokerage failed after executing it."""
    approval = start_waiting(op, run_id, agent=agent)
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve")
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    return UnknownOutcome.objects.get(tenant_id="t1", run_id=run_id)


def test_check_finds_the_order_and_prefills_executed_with_its_record(people, brokerage_path, as_user):
    """The card's button asks the brokerage by key; the form comes back with yes and the record."""
    item = make_unknown(people["op"], "k1")
    client = as_user("rita")
    assert "Check the brokerage" in client.get("/").content.decode()
    response = client.post(f"/unknown/{item.pk}/check/", {}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and "it was executed" in body
    entry = PaperBrokerage().entry(item.idempotency_key)
    assert 'value="yes" required checked' in body and entry.result["order_id"] in body
    assert not UnknownOutcome.objects.get(pk=item.pk).settled  # a check decides nothing
    note = body.split('name="note"')[1].split(">")[0] + body.split('name="note"')[1].split("</textarea>")[0]
    assert "by its key" not in note  # the note is the person's to write: nothing typed for them
    record = json.dumps(entry.result, sort_keys=True)
    done = client.post(
        f"/unknown/{item.pk}/reconcile/", {"executed": "yes", "note": "found", "result": record}, **HTMX
    )
    assert done.status_code == 200
    drain()
    assert entry.result["order_id"] in DjangoCheckpointStore().load("t1", "k1").final_answer


def test_check_without_a_record_prefills_not_executed(people, brokerage_path, as_user, monkeypatch):
    """No record for the key: the form comes back with no; still only a suggestion."""
    item = make_unknown(people["op"], "k2")
    monkeypatch.setattr(PaperBrokerage, "entry", lambda self, key: None)
    response = as_user("rita").post(f"/unknown/{item.pk}/check/", {}, **HTMX)
    body = response.content.decode()
    assert "no record of this call" in body and 'value="no" checked' in body
    assert not UnknownOutcome.objects.get(pk=item.pk).settled


@pytest.mark.parametrize(
    ("agent", "says"),
    [("hanging-lookup", "did not answer within"), ("broken-lookup", "failed")],
)
def test_a_lookup_that_hangs_or_raises_says_so_and_leaves_it_to_the_person(
    people, brokerage_path, as_user, agents, monkeypatch, agent, says
):
    """Timed out or raised: a warning, no prefill, nothing settled; the person decides."""
    monkeypatch.setattr(lookups, "LOOKUP_TIMEOUT_SECONDS", 0.3)
    item = make_unknown(people["op"], f"k-{agent}", agent)
    response = as_user("rita").post(f"/unknown/{item.pk}/check/", {}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and says in body
    assert "checked" not in body.split("What happened downstream?")[1].split("</fieldset>")[0]
    assert not UnknownOutcome.objects.get(pk=item.pk).settled


def test_the_unknown_card_says_what_the_call_was_for_and_who_approved_it(people, brokerage_path, as_user):
    """Goal, effect in words, who approved and when, as the approval card had; the why said once."""
    item = make_unknown(people["op"], "k5")
    approval = Approval.objects.get(tenant_id="t1", run_id="k5", action_id=item.action_id)
    html = as_user("rita").get("/").content.decode()
    card = html.split(f'id="item-u-{item.pk}"')[1].split("</article>")[0]
    assert f"<strong>Goal:</strong> {approval.goal}" in card and approval.goal
    assert f"<strong>What it was to do:</strong> {approval.impact}" in card and approval.impact
    decided = approval.decided_at.strftime("%Y-%m-%d %H:%M")
    assert '<strong>Approved:</strong> <span class="voter">op</span>, <time' in card and decided in card
    assert "It is not known whether" not in card and card.count("Nobody knows whether") == 1


def test_an_unknown_call_no_person_approved_says_so(people, as_user):
    """A WRITE its policy let run without a person: the card says no person approved it."""
    from datetime import UTC, datetime

    row = UnknownOutcome.objects.create(
        tenant_id="t1",
        run_id="k6",
        action_id="1-1",
        agent="paper-trader",
        tool="place_order",
        arguments='{"symbol": "ACME"}',
        idempotency_key="kg_k6",
        code="tool_timeout",
        detected_at=datetime.now(UTC),
    )
    card = as_user("rita").get("/").content.decode().split(f'id="item-u-{row.pk}"')[1].split("</article>")[0]
    assert "<strong>Approved:</strong> no person: its policy let it run without one." in card
    assert "The tool did not answer in time. Nobody knows whether" in card


def test_a_viewer_cannot_check(people, brokerage_path, as_user):
    """The lookup is for reconcilers: 403 for a viewer, and no button on their card."""
    item = make_unknown(people["op"], "k3")
    assert "Check the brokerage" not in as_user("viewer").get("/").content.decode()
    assert as_user("viewer").post(f"/unknown/{item.pk}/check/", {}).status_code == 403


def test_an_agent_that_allows_it_is_settled_by_the_worker_with_the_record(people, brokerage_path, agents):
    """auto_settle: the next worker pass asks the brokerage, settles as executed, audited as confirmer."""
    approval = start_waiting(people["op"], "k4", agent="auto-settle")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    run = Run.objects.get(run_id="k4")
    assert run.status == RunStatus.DONE, run.stop_reason
    state = DjangoCheckpointStore().load("t1", "k4")
    order = next(a for a in state.actions if a.tool == "place_order")
    assert order.outcome.settled_by == "confirmer:lookup"
    (entry,) = PaperBrokerage().ledger()
    assert json.loads(order.outcome.output)["order_id"] == entry.result["order_id"] and entry.executions == 1
    event = next(e for e in audit_log().events("t1") if e.kind == "loop.reconciled")
    assert event.body["source"] == "confirmer" and event.body["result_recorded"] is True
    assert not Approval.objects.filter(run_id="k4", status="pending").exists()
