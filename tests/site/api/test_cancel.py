"""Cancelling a run from the API, the console and while a worker holds it."""

from __future__ import annotations

import threading
import time

from approvals.models import Approval, ApprovalStatus
from approvals.services import run_cancel
from audit.wiring import audit_log
from runs.agents.brokerage import PaperBrokerage
from runs.engine.worker import Worker
from runs.models import IdempotencyRecord, Run, RunStatus
from runs.services import run_start
from tests.site.api.conftest import drain, start_pending


def test_cancel_a_waiting_run_through_the_api(client, api, keys, pending):
    """200 cancelled; the approval is withdrawn and leaves the inbox; a late approve is 409; idempotent."""
    response = client.post("/runs/r1/cancel", {"note": "wrong account"})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled" and response.json()["resumable"] is False
    approval = Approval.objects.get(pk=pending.pk)
    assert approval.status == ApprovalStatus.WITHDRAWN and approval.decided_by == "op"
    assert client.get("/approvals").json()["items"] == []
    late = client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
    assert late.status_code == 409
    assert client.post("/runs/r1/cancel").status_code == 200  # again: nothing more happens
    kinds = [e.kind for e in audit_log().events("t1") if e.body.get("run_id") == "r1"]
    assert kinds.count("run.cancelled") == 1
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.CANCELLED
    assert PaperBrokerage().ledger() == []
    assert api(keys.viewer).post("/runs/r1/cancel").status_code == 403
    assert client.post("/runs/nope/cancel").status_code == 404


def test_a_finished_run_cannot_be_cancelled(client, pending):
    """409 run_finished, and the run stays done."""
    assert (
        client.post(
            f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash}
        ).status_code
        == 200
    )
    drain()
    response = client.post("/runs/r1/cancel")
    assert response.status_code == 409 and response.json()["code"] == "run_finished"
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE


def test_a_queued_run_that_never_started_is_cancelled_and_never_claimed(client, keys, brokerage_path):
    """No checkpoint yet: the run closes as cancelled and a worker finds nothing to do."""
    from django.contrib.auth import get_user_model

    op = get_user_model().objects.get(username="op")
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=op, run_id="q1")
    assert client.post("/runs/q1/cancel").status_code == 200
    assert Worker(lease_seconds=30).run_once() is False
    assert Run.objects.get(run_id="q1").status == RunStatus.CANCELLED


def test_a_run_held_by_a_worker_stops_at_its_next_step_and_the_running_write_finishes(keys, brokerage_path):
    """Cancelled while its order hangs in the brokerage: the order completes once, nothing after it runs."""
    from django.contrib.auth import get_user_model

    op = get_user_model().objects.get(username="op")
    approval = start_pending("t1", "op", run_id="h1")
    from approvals.services import approval_decide

    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve")
    PaperBrokerage().set_mode("hang", hang_seconds=1.0)
    worker = Worker(lease_seconds=0.6)
    claim = worker.claim()
    assert claim is not None

    def cancel_when_in_flight() -> None:
        from django.db import connection

        try:
            deadline = time.monotonic() + 10
            while not IdempotencyRecord.objects.filter(run_id="h1", status="in_flight").exists():
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)
            run_cancel(tenant_id="t1", run_id="h1", user=op, note="stop")
        finally:
            connection.close()

    canceller = threading.Thread(target=cancel_when_in_flight)
    canceller.start()
    status = worker.execute(claim)
    canceller.join(timeout=10)
    PaperBrokerage().set_mode("normal")
    assert status == RunStatus.CANCELLED
    run = Run.objects.get(run_id="h1")
    assert run.status == RunStatus.CANCELLED and run.cancel_requested_by == "op"
    assert [(e.executions, e.replays) for e in PaperBrokerage().ledger()] == [(1, 0)]
    from runs.engine.stores import DjangoCheckpointStore

    state = DjangoCheckpointStore().load("t1", "h1")
    assert state.stop_reason.value == "cancelled" and state.final_answer is None  # no step after it
    record = IdempotencyRecord.objects.get(run_id="h1")
    assert record.status == "completed"  # handed to its tool before the cancel: it finished
    events = [e.kind for e in audit_log().events("t1") if e.body.get("run_id") == "h1"]
    assert "run.cancel_requested" in events
    assert Worker(lease_seconds=30).run_once() is False


def test_cancel_from_the_run_page(client, keys, pending):
    """An approver's Cancel button on the run page: the run ends cancelled, the page says so."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    browser = Client()
    browser.force_login(get_user_model().objects.get(username="op"))
    page = browser.get("/runs/t1/r1/").content.decode()
    assert "Cancel run" in page
    asked = {"note": "no longer needed", "confirm": "yes"}
    response = browser.post("/runs/t1/r1/cancel/", asked, follow=True)
    assert "Cancelled: the run will not continue" in response.content.decode()
    assert Run.objects.get(run_id="r1").status == RunStatus.CANCELLED
    assert "Cancel run" not in browser.get("/runs/t1/r1/").content.decode()


def test_the_run_pages_cancel_of_a_finished_run_says_so_in_the_consoles_words(client, pending):
    """The console's wording of run_finished, as a warning back on the run page; the run stays done."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    assert (
        client.post(
            f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash}
        ).status_code
        == 200
    )
    drain()
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="op"))
    response = browser.post("/runs/t1/r1/cancel/", {"note": "", "confirm": "yes"}, follow=True)
    assert response.redirect_chain == [("/runs/t1/r1/", 303)]
    assert "Not cancelled: the run has already finished." in response.content.decode()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE


def test_deciding_a_withdrawn_approval_says_the_run_was_cancelled_and_by_whom(client, pending):
    """After op cancelled the run, approve is 409 approval_withdrawn naming op; the card says withdrawn.

    Not "already settled by op": op cancelled the run, nobody decided the call.
    """
    from django.contrib.auth import get_user_model
    from django.test import Client

    assert client.post("/runs/r1/cancel", {"note": "wrong account"}).status_code == 200
    late = client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
    assert late.status_code == 409
    assert late.json() == {
        "code": "approval_withdrawn",
        "detail": "The run was cancelled while this approval waited: it was withdrawn. (op)",
    }
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="op"))
    card = browser.post(f"/approvals/{pending.pk}/approve/", {"note": "ok"}, HTTP_HX_REQUEST="true")
    html = card.content.decode()
    assert card.status_code == 409
    assert "Withdrawn: op cancelled the run while this waited, so nobody decides it." in html
    assert "settled by" not in html
    plain = browser.post(f"/approvals/{pending.pk}/deny/", {"note": "no"}, follow=True)
    assert "Withdrawn: op cancelled the run while this waited" in plain.content.decode()
    assert Approval.objects.get(pk=pending.pk).status == ApprovalStatus.WITHDRAWN
