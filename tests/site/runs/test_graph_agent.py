"""A LangGraph graph registered as an agent: run by the worker, decided in the inbox, once."""

from __future__ import annotations

import pytest

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from approvals.services import approval_decide, run_cancel, unknown_reconcile
from audit.selectors import audit_verify
from keelgate.loop import ActionStatus, Phase
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import Checkpoint, GraphCheckpoint, Run, RunStatus
from runs.services import run_start


def drain(worker: Worker) -> None:
    while worker.run_once():
        pass


def waiting_run(op, goal: str = "buy 7 ACME") -> Approval:
    """Start the graph trader and drive it to the order's approval."""
    run_start(tenant_id="t1", agent="graph-trader", goal=goal, user=op, run_id="g1")
    drain(Worker(lease_seconds=30))
    run = Run.objects.get(tenant_id="t1", run_id="g1")
    assert run.status == RunStatus.WAITING and run.stop_reason == "approval_pending"
    return Approval.objects.get(tenant_id="t1", run_id="g1")


def state(run_id: str = "g1"):  # type: ignore[no-untyped-def]
    found = DjangoCheckpointStore().load("t1", run_id)
    assert found is not None
    return found


def test_the_graph_waits_in_the_inbox_and_places_one_order_once_approved(operator, brokerage_path):
    """Quote, stop at the order for a person (an inbox row), approve, finish: one execution, chain intact."""
    approval = waiting_run(operator)
    assert approval.status == ApprovalStatus.PENDING and approval.tool == "place_order"
    assert approval.agent == "graph-trader" and '"quantity":7' in approval.arguments
    assert PaperBrokerage().ledger() == []
    assert GraphCheckpoint.objects.filter(tenant_id="t1", thread_id="g1").exists()
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="ok")
    assert Run.objects.get(run_id="g1").status == RunStatus.QUEUED
    drain(Worker(lease_seconds=30))
    run = Run.objects.get(run_id="g1")
    assert run.status == RunStatus.DONE
    ledger = PaperBrokerage().ledger()
    assert [(e.executions, e.replays) for e in ledger] == [(1, 0)]
    final = state()
    assert final.final_answer == "buy 7 ACME: placed."
    assert [(a.tool, a.status) for a in final.actions] == [
        ("get_quote", ActionStatus.DONE),
        ("place_order", ActionStatus.DONE),
    ]
    phases = [s.phase for s in DjangoCheckpointStore().history("t1", "g1")]
    assert Phase.PLAN in phases and Phase.ACT in phases and phases[-1] is Phase.DONE  # the graph's steps
    assert audit_verify(tenant_id="t1").ok


def test_deny_runs_nothing_and_the_graph_reports_it(operator, brokerage_path):
    """A denial resumes the graph, which reports the order not placed; the brokerage saw nothing."""
    approval = waiting_run(operator)
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="deny", note="no")
    drain(Worker(lease_seconds=30))
    assert Run.objects.get(run_id="g1").status == RunStatus.DONE
    assert state().final_answer == "buy 7 ACME: not placed."
    assert PaperBrokerage().ledger() == []


def test_edit_then_approve_places_the_edited_order(operator, brokerage_path):
    """Edited to 3 in the inbox: the graph runs the edited call, once, and never the proposal."""
    approval = waiting_run(operator)
    approval_decide(
        tenant_id="t1",
        approval_id=approval.pk,
        user=operator,
        decision="approve",
        note="smaller",
        arguments={"symbol": "ACME", "side": "buy", "quantity": 3},
    )
    drain(Worker(lease_seconds=30))
    assert Run.objects.get(run_id="g1").status == RunStatus.DONE
    (entry,) = PaperBrokerage().ledger()
    assert entry.executions == 1 and entry.quantity == 3
    by_id = {a.action_id: a for a in state().actions}
    assert by_id["order-1"].status is ActionStatus.DENIED and by_id["order-1.e1"].status is ActionStatus.DONE


def test_an_unknown_outcome_waits_for_a_person_and_is_never_run_again(operator, brokerage_path):
    """The brokerage fails after accepting: an unknown outcome in the inbox; settled, the graph ends once."""
    approval = waiting_run(operator)
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="ok")
    PaperBrokerage().set_mode("fail")
    drain(Worker(lease_seconds=30))
    PaperBrokerage().set_mode("normal")
    run = Run.objects.get(run_id="g1")
    assert run.status == RunStatus.WAITING and run.stop_reason == "outcome_unknown"
    item = UnknownOutcome.objects.get(run_id="g1")
    assert PaperBrokerage().entry(item.idempotency_key) is not None  # it did execute
    unknown_reconcile(tenant_id="t1", item_id=item.pk, user=operator, executed=True, note="at the broker")
    drain(Worker(lease_seconds=30))
    assert Run.objects.get(run_id="g1").status == RunStatus.DONE
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]
    assert state().final_answer == "buy 7 ACME: placed."


def test_cancel_withdraws_the_graphs_approval_and_it_never_resumes(operator, brokerage_path):
    """Cancelled while waiting: the approval is withdrawn, the worker finds nothing to run."""
    approval = waiting_run(operator)
    run_cancel(tenant_id="t1", run_id="g1", user=operator, note="changed my mind")
    assert Run.objects.get(run_id="g1").status == RunStatus.CANCELLED
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.WITHDRAWN
    assert not Worker(lease_seconds=30).run_once()
    assert PaperBrokerage().ledger() == []


@pytest.mark.parametrize("agent", ["graph-trader"])
def test_the_runs_list_and_timeline_show_the_graph_run(operator, brokerage_path, client, agent):
    """The runs page lists the graph run and its page shows the gated calls."""
    waiting_run(operator)
    client.force_login(operator)
    listing = client.get("/runs/?tenant=t1")
    assert listing.status_code == 200 and b"g1" in listing.content
    page = client.get("/runs/t1/g1/")
    assert page.status_code == 200 and b"place_order" in page.content and b"get_quote" in page.content
    assert Checkpoint.objects.filter(tenant_id="t1", run_id="g1").count() >= 3


def test_the_approval_card_describes_the_order_with_the_graphs_quote(operator, brokerage_path):
    """The order's plain-words line uses the quote the graph read a step before (untrusted, display only)."""
    approval = waiting_run(operator)
    assert approval.impact.startswith("buy 7 ACME") and "101.5" in approval.impact.replace(",", "")


def test_a_finished_graph_run_has_a_replay_page(operator, brokerage_path, client):
    """The replay page of a done graph run renders (200, never a 500), from its Keelgate checkpoints."""
    approval = waiting_run(operator)
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="ok")
    drain(Worker(lease_seconds=30))
    client.force_login(operator)
    page = client.get("/runs/t1/g1/replay/")
    assert page.status_code == 200
