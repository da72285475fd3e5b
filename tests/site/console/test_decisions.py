"""Approve, deny and reconcile from the console: forms, htmx fragments, races, roles, CSRF."""

from __future__ import annotations

import threading

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run, RunStatus
from tests.site._audit import logged

from .conftest import drain, login, start_waiting

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_approve_with_a_note_queues_the_run_and_audits_the_user(waiting, as_user):
    """A plain POST approves as the logged-in user, redirects to the inbox with a message."""
    client = as_user("bob")
    response = client.post(f"/approvals/{waiting.pk}/approve/", {"note": "looks right"})
    assert response.status_code == 303 and response["Location"] == "/"
    approval = Approval.objects.get(pk=waiting.pk)
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by == "bob"
    assert approval.votes[0]["note"] == "looks right"
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED
    event = logged().filter(tenant_id="t1", kind="approval.decided").get()
    assert event.actor == "bob" and '"decision":"approve"' in event.body
    page = client.get("/").content.decode()
    assert "Approved place_order in run r1" in page and f"item-a-{waiting.pk}" not in page
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert len(PaperBrokerage().ledger()) == 1


def test_an_htmx_approve_returns_an_empty_item_and_a_flash(waiting, as_user):
    """With htmx the settled item is swapped for nothing and a flash is swapped in out of band."""
    response = as_user("bob").post(f"/approvals/{waiting.pk}/approve/", {"note": ""}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and response["HX-Reswap"] == "outerHTML"
    assert "<article" not in body and 'id="flash" hx-swap-oob="afterbegin"' in body
    assert "Approved place_order in run r1" in body


def test_deny_requires_a_reason_and_the_reason_reaches_the_run(waiting, as_user):
    """An empty reason is refused (400, item kept with the error); a reason denies the order."""
    client = as_user("bob")
    refused = client.post(f"/approvals/{waiting.pk}/deny/", {"note": "  "}, **HTMX)
    assert refused.status_code == 400
    assert f'id="item-a-{waiting.pk}"' in refused.content.decode()
    assert "A reason is required: say why in the note." in refused.content.decode()
    assert Approval.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING
    response = client.post(f"/approvals/{waiting.pk}/deny/", {"note": "not today"})
    assert response.status_code == 303
    approval = Approval.objects.get(pk=waiting.pk)
    assert approval.status == ApprovalStatus.DENIED and approval.note == "not today"
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE and PaperBrokerage().ledger() == []


def test_the_loser_of_two_decisions_is_told_who_settled_it(waiting, people):
    """Two people post at once: exactly one decision takes effect; the other sees its author."""
    clients = {"op": login(people["op"]), "bob": login(people["bob"])}
    results: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def decide(name, decision, note):
        barrier.wait()
        results[name] = clients[name].post(f"/approvals/{waiting.pk}/{decision}/", {"note": note}, **HTMX)

    threads = [
        threading.Thread(target=decide, args=("op", "approve", "")),
        threading.Thread(target=decide, args=("bob", "deny", "no")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    approval = Approval.objects.get(pk=waiting.pk)
    winner = approval.decided_by
    loser = "bob" if winner == "op" else "op"
    assert approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED)
    assert results[winner].status_code == 200
    assert results[loser].status_code == 409
    assert f"Already settled by {winner}." in results[loser].content.decode()
    assert logged().filter(tenant_id="t1", kind="approval.decided").count() == 1


def test_a_replayed_or_double_clicked_post_changes_nothing(waiting, as_user):
    """The same approve posted twice: one decision, one audit event, the second says settled."""
    client = as_user("bob")
    first = client.post(f"/approvals/{waiting.pk}/approve/", {"note": "ok"})
    second = client.post(f"/approvals/{waiting.pk}/approve/", {"note": "ok"}, follow=True)
    assert first.status_code == 303
    assert b"Already settled by bob." in second.content
    assert logged().filter(tenant_id="t1", kind="approval.decided").count() == 1


def test_four_eyes_shows_who_approved_and_needs_a_second_person(people, brokerage_path, settings, as_user):
    """required=2: op's approval is shown on the item; op cannot approve twice; bob's second approves."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "four-eyes": "tests.site.console.agents.build_four_eyes",
    }
    approval = start_waiting(people["op"], "f1", agent="four-eyes")
    assert approval.required == 2
    op = as_user("op")
    first = op.post(f"/approvals/{approval.pk}/approve/", {"note": "first look"}, **HTMX)
    body = first.content.decode()
    assert first.status_code == 200 and "1 more approver needed" in body
    assert "Four-eyes:" in body and "1 of 2 approved: " in body and "1 more needed" in body
    assert "op" in body and "first look" in body and "a denial by any one of them ends it" in body
    assert "You approved this" in body and f"/approvals/{approval.pk}/approve/" not in body
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert Run.objects.get(run_id="f1").status == RunStatus.WAITING
    again = op.post(f"/approvals/{approval.pk}/approve/", {"note": "sure"}, **HTMX)
    assert again.status_code == 409 and "a different person must approve it too" in again.content.decode()
    assert "<article" not in again.content.decode()  # nothing op could do with the card: it goes
    bob_view = as_user("bob").get("/").content.decode()
    assert 'approved: <span class="voter">op</span>' in bob_view
    assert f"/approvals/{approval.pk}/approve/" in bob_view
    second = as_user("bob").post(f"/approvals/{approval.pk}/approve/", {"note": ""})
    assert second.status_code == 303
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
    assert Run.objects.get(run_id="f1").status == RunStatus.QUEUED


def test_reconcile_needs_a_verdict_and_a_note_then_the_run_finishes(unknown, as_user):
    """Executed/not-executed and a note are required; recorded as the user; the run resumes.

    A refused form keeps what was typed; a second settle is refused naming the first person,
    and the card stays with what they typed.
    """
    client = as_user("rita")
    html = client.get("/").content.decode()
    assert f'id="item-u-{unknown.pk}"' in html and unknown.idempotency_key in html
    missing = client.post(f"/unknown/{unknown.pk}/reconcile/", {"note": "checked"}, **HTMX)
    assert missing.status_code == 400 and "Say whether the call was executed." in missing.content.decode()
    no_note = client.post(f"/unknown/{unknown.pk}/reconcile/", {"executed": "yes", "note": ""}, **HTMX)
    assert (
        no_note.status_code == 400
        and "A reason is required: say why in the note." in no_note.content.decode()
    )
    assert 'value="yes" required checked' in no_note.content.decode()
    executed = PaperBrokerage().entry(unknown.idempotency_key) is not None
    response = client.post(
        f"/unknown/{unknown.pk}/reconcile/",
        {"executed": "yes" if executed else "no", "note": "seen at broker"},
    )
    assert response.status_code == 303
    item = UnknownOutcome.objects.get(pk=unknown.pk)
    assert item.settled and item.settled_by == "rita" and item.executed is executed
    assert Run.objects.get(run_id="u1").status == RunStatus.QUEUED
    again = client.post(f"/unknown/{unknown.pk}/reconcile/", {"executed": "no", "note": "x"}, **HTMX)
    assert again.status_code == 409 and "Already settled by rita." in again.content.decode()
    assert "what you typed is below" in again.content.decode() and 'value="x"' in again.content.decode()
    drain()
    assert Run.objects.get(run_id="u1").status == RunStatus.DONE


def test_roles_are_refused_on_the_server(waiting, unknown, as_user):
    """A viewer cannot approve (403); an approver cannot reconcile (403); nothing changes."""
    assert as_user("viewer").post(f"/approvals/{waiting.pk}/approve/", {"note": ""}).status_code == 403
    assert (
        as_user("bob").post(f"/unknown/{unknown.pk}/reconcile/", {"executed": "no", "note": "x"}).status_code
        == 403
    )
    assert "/reconcile/" not in as_user("bob").get("/").content.decode()
    assert Approval.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING
    assert not UnknownOutcome.objects.get(pk=unknown.pk).settled


def test_another_tenants_objects_are_not_found(waiting, unknown, as_user):
    """Every URL of tenant t1 is a 404 for eve of t2, exactly like a missing object."""
    eve = as_user("eve")
    for url in ["/runs/t1/r1/", "/runs/t1/r1/status/", "/audit/t1/", "/runs/t1/nope/", "/audit/zz/"]:
        assert eve.get(url).status_code == 404, url
    for url, data in [
        (f"/approvals/{waiting.pk}/approve/", {"note": ""}),
        (f"/approvals/{waiting.pk}/deny/", {"note": "x"}),
        (f"/unknown/{unknown.pk}/reconcile/", {"executed": "no", "note": "x"}),
        ("/runs/t1/r1/resume/", {}),
        ("/audit/t1/verify/", {}),
        ("/approvals/999999/approve/", {"note": ""}),
    ]:
        assert eve.post(url, data).status_code == 404, url
    assert Approval.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING


def test_every_form_is_csrf_protected(waiting, unknown, people):
    """Without the CSRF token every POST is refused (403) and nothing is decided."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["op"])
    for url, data in [
        (f"/approvals/{waiting.pk}/approve/", {"note": ""}),
        (f"/approvals/{waiting.pk}/deny/", {"note": "x"}),
        (f"/unknown/{unknown.pk}/reconcile/", {"executed": "no", "note": "x"}),
        ("/runs/t1/r1/resume/", {}),
        ("/audit/t1/verify/", {}),
        ("/logout/", {}),
    ]:
        assert client.post(url, data, **HTMX).status_code == 403, url
    assert Approval.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING
    page = client.get("/").content.decode()
    token = client.cookies["csrftoken"].value
    assert 'name="csrfmiddlewaretoken"' in page and "X-CSRFToken" in page
    ok = client.post(f"/approvals/{waiting.pk}/approve/", {"note": ""}, HTTP_X_CSRFTOKEN=token, **HTMX)
    assert ok.status_code == 200
    login_page = Client(enforce_csrf_checks=True)
    assert login_page.post("/login/", {"username": "op", "password": "x"}).status_code == 403


def test_approving_an_expired_approval_is_refused(people, brokerage_path, settings, as_user):
    """Past its expiry an approval cannot be approved: the console says it expired (fail closed).

    The note typed for it is shown again with the card, as when someone else decided first.
    """
    import time

    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "expiring": "tests.site.console.agents.build_expiring",
    }
    approval = start_waiting(people["op"], "x2", agent="expiring")
    assert "in 0" in as_user("bob").get("/").content.decode()  # "Expires in 0 minutes"
    while timezone.now() <= approval.expires_at:  # wait for the expiry itself, not a guess
        time.sleep(0.02)
    response = as_user("bob").post(f"/approvals/{approval.pk}/approve/", {"note": "looks right"}, **HTMX)
    assert response.status_code == 409 and "expired" in response.content.decode()
    assert 'value="looks right"' in response.content.decode()
    # The expiry itself is saved and audited at once, and the run goes on without the call.
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.EXPIRED
    assert Run.objects.get(run_id="x2").status == RunStatus.QUEUED


def test_the_reconcile_form_takes_the_result_found_downstream(unknown, as_user):
    """A JSON object is recorded as the call's output; bad JSON or a list keeps the typed text, 400."""
    from django.utils.html import escape

    from runs.engine.stores import DjangoCheckpointStore

    client = as_user("rita")
    url = f"/unknown/{unknown.pk}/reconcile/"
    entry = PaperBrokerage().entry(unknown.idempotency_key)
    assert entry is not None  # the brokerage failed after executing
    for bad, says in [
        ('{"order_id": ', "The result is not JSON"),
        ('["PB-000001"]', "must be a JSON object"),
    ]:
        response = client.post(url, {"executed": "yes", "note": "seen", "result": bad}, **HTMX)
        body = response.content.decode()
        assert response.status_code == 400 and says in body
        assert 'value="seen"' in body and escape(bad) in body  # what was typed is kept, escaped
    not_run = client.post(url, {"executed": "no", "note": "seen", "result": '{"a": 1}'}, **HTMX)
    assert (
        not_run.status_code == 400
        and "only recorded for a call that was executed" in not_run.content.decode()
    )
    assert not UnknownOutcome.objects.get(pk=unknown.pk).settled
    record = f'{{"order_id": "{entry.result["order_id"]}", "price": {entry.result["price"]}}}'
    response = client.post(url, {"executed": "yes", "note": "in the ledger", "result": record}, **HTMX)
    assert response.status_code == 200 and "with the result you found" in response.content.decode()
    drain()
    state = DjangoCheckpointStore().load("t1", "u1")
    assert entry.result["order_id"] in state.final_answer and "rita" in state.final_answer
    assert Run.objects.get(run_id="u1").status == RunStatus.DONE
