"""Expiry on the site: the sweeper warns once, escalates to admins, then denies; roles are enforced.

The paper trader's orders wait 4 hours, then go to an admin for one more hour, warned
30 minutes before each deadline. Time is moved by shifting the run's checkpoint into
the past (a newer checkpoint, projected like any other), never by sleeping.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services import approvals_expire, approvals_warn
from audit.models import AuditEvent
from keelgate.errors import CrashFailpoint
from keelgate.loop import Failpoints
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.signals import worker_idle
from tenants.api_keys import api_key_create
from tenants.models import Tenant
from tests.site._audit import logged
from tests.site._threads import all_returned, at_once
from tests.site.api.conftest import Api

from .conftest import drain

HTMX = {"HTTP_HX_REQUEST": "true"}


def shift(approval: Approval, by: timedelta) -> Approval:
    """Move the approval's request, deadlines and escalation ``by`` into the past; the row re-read."""
    store = DjangoCheckpointStore()
    state = store.load(approval.tenant_id, approval.run_id)
    assert state is not None
    held = state.action(approval.action_id).approval
    assert held is not None
    for name in ("requested_at", "expires_at", "escalated_at", "warned_at", "warned_for"):
        if getattr(held, name) is not None:
            setattr(held, name, getattr(held, name) - by)
    state.seq += 1
    with transaction.atomic():
        store.save(state)
    return Approval.objects.get(pk=approval.pk)


def chain(kind: str) -> list[AuditEvent]:
    return list(logged().filter(tenant_id="t1", kind=kind).order_by("seq"))


def warn_window(approval: Approval) -> Approval:
    """20 minutes left of the first deadline: inside its 30-minute warning window."""
    return shift(approval, timedelta(hours=3, minutes=40))


def escalated(approval: Approval) -> Approval:
    """The first deadline passed a minute ago and the sweeper ran: escalated to admins."""
    approval = shift(approval, timedelta(hours=4, minutes=1))
    assert approvals_expire() == 1
    return Approval.objects.get(pk=approval.pk)


def key_for(people, name: str) -> Api:
    return Api(
        api_key_create(by="tester", tenant=Tenant.objects.get(slug="t1"), user=people[name], name=name)[1]
    )


def test_the_policy_reaches_the_inbox_row(waiting):
    """A new order's row: due in 4 hours, escalating to admins, its warning 30 minutes earlier."""
    assert waiting.escalates_to == "admin" and waiting.escalated_to == "" and waiting.warned_at is None
    assert waiting.expires_at - waiting.requested_at == timedelta(hours=4)
    assert waiting.expires_at - waiting.warn_at == timedelta(minutes=30)
    assert waiting.required_role == "approver"


def test_the_sweeper_warns_once_before_the_deadline(waiting):
    """Not before the window; inside it one approval.expiring by expiry, however often it sweeps."""
    assert approvals_warn() == 0
    approval = warn_window(waiting)
    assert approvals_warn() == 1
    assert approvals_warn() == 0
    worker_idle.send(sender=Worker)  # the worker's idle sweep: nothing more either
    (warning,) = chain("approval.expiring")
    assert warning.actor == "expiry"
    assert json.loads(warning.body) == {
        "run_id": "r1",
        "action_id": approval.action_id,
        "tool": "place_order",
        "expires_at": approval.expires_at.isoformat(),
        "escalates_to": "admin",
    }
    row = Approval.objects.get(pk=waiting.pk)
    assert row.warned_at is not None and row.status == ApprovalStatus.PENDING


def test_a_crash_between_the_warning_event_and_its_checkpoint_leaves_neither(waiting, monkeypatch):
    """Killed at after_warning_audit: one transaction held both, neither is left; a new sweep warns once."""
    import approvals.services

    approval = warn_window(waiting)
    real = approvals.services.build_loop

    def crashing(agent, **kwargs):
        loop = real(agent, **kwargs)
        loop.failpoints = Failpoints({"after_warning_audit": 1})
        return loop

    monkeypatch.setattr(approvals.services, "build_loop", crashing)
    with pytest.raises(CrashFailpoint):
        approvals_warn()
    assert chain("approval.expiring") == [] and Approval.objects.get(pk=approval.pk).warned_at is None
    monkeypatch.setattr(approvals.services, "build_loop", real)
    assert approvals_warn() == 1 and approvals_warn() == 0
    assert len(chain("approval.expiring")) == 1


def test_the_first_deadline_escalates_to_admins_with_a_new_deadline_and_an_audit_event(waiting):
    """Past 4 hours: still pending, for admins, due an hour from the sweep; the run keeps waiting."""
    approval = shift(waiting, timedelta(hours=4, minutes=1))
    before = timezone.now()
    assert approvals_expire() == 1
    assert approvals_expire() == 0  # the new deadline is not due
    row = Approval.objects.get(pk=approval.pk)
    assert row.status == ApprovalStatus.PENDING and row.escalated_to == "admin" and row.escalates_to == ""
    assert row.required_role == "admin"
    assert before + timedelta(hours=1) <= row.expires_at <= timezone.now() + timedelta(hours=1)
    assert row.warned_at is None and row.warn_at == row.expires_at - timedelta(minutes=30)
    (event,) = chain("approval.escalated")
    assert event.actor == "expiry"
    body = json.loads(event.body)
    assert body["escalated_to"] == "admin" and body["expires_at"] == row.expires_at.isoformat()
    assert body["previous_expires_at"] == approval.expires_at.isoformat()
    assert Run.objects.get(run_id="r1").status == RunStatus.WAITING
    assert chain("approval.expired") == []


def test_after_escalation_an_approver_is_refused_by_the_api_and_the_console(waiting, people, as_user):
    """bob (approver): 403 approval_escalated on approve and deny, the console refuses; nothing recorded."""
    approval = escalated(waiting)
    bob = key_for(people, "bob")
    for path, body in [("approve", {"arguments_hash": approval.arguments_hash}), ("deny", {"note": "no"})]:
        response = bob.post(f"/approvals/{approval.pk}/{path}", body)
        assert response.status_code == 403, response.content
        assert response.json()["code"] == "approval_escalated"
        assert response.json()["detail"].endswith("(admin)")
    console = as_user("bob").post(f"/approvals/{approval.pk}/approve/", {"note": ""}, **HTMX)
    assert console.status_code >= 400 and "escalated" in console.content.decode()
    row = Approval.objects.get(pk=approval.pk)
    assert row.status == ApprovalStatus.PENDING and row.votes == []
    assert chain("approval.decided") == []


def test_after_escalation_an_admin_approves_and_the_order_is_placed_once(waiting, as_user):
    """op (admin) approves from the card: approved, the run finishes, one order downstream."""
    approval = escalated(waiting)
    response = as_user("op").post(f"/approvals/{approval.pk}/approve/", {"note": "covering"}, **HTMX)
    assert response.status_code == 200, response.content
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert len(PaperBrokerage().ledger()) == 1


def test_the_second_deadline_denies_fail_closed(waiting):
    """An hour after the escalation nobody decided: expired, the run goes on without the order."""
    approval = shift(escalated(waiting), timedelta(hours=1, minutes=1))
    assert approvals_expire() == 1
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.EXPIRED
    assert len(chain("approval.escalated")) == 1 and len(chain("approval.expired")) == 1
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED
    drain()
    assert Run.objects.get(run_id="r1").status == RunStatus.DONE
    assert PaperBrokerage().ledger() == []


def test_a_late_decision_before_any_sweep_escalates_and_is_refused(waiting, people):
    """bob approves a minute past the deadline: the escalation is kept (audited), his vote is not."""
    approval = shift(waiting, timedelta(hours=4, minutes=1))
    response = key_for(people, "bob").post(
        f"/approvals/{approval.pk}/approve", {"arguments_hash": approval.arguments_hash}
    )
    assert response.status_code == 403 and response.json()["code"] == "approval_escalated"
    row = Approval.objects.get(pk=approval.pk)
    assert row.escalated_to == "admin" and row.votes == [] and row.status == ApprovalStatus.PENDING
    assert len(chain("approval.escalated")) == 1
    assert approvals_expire() == 0  # already applied


def test_the_api_and_the_card_say_it_was_escalated(waiting, people, as_user):
    """ApprovalOut names the roles and the warning; the card says "escalated to admins, expires in"."""
    op = key_for(people, "op")
    approval = warn_window(waiting)
    approvals_warn()
    out = op.get(f"/approvals/{approval.pk}").json()
    assert out["required_role"] == "approver" and out["escalates_to"] == "admin"
    assert out["escalated_to"] is None and out["warned_at"] is not None
    approval = escalated(approval)
    out = op.get(f"/approvals/{approval.pk}").json()
    assert out["required_role"] == "admin" and out["escalated_to"] == "admin"
    assert out["escalates_to"] is None and out["warned_at"] is None  # the new deadline: not warned yet
    html = as_user("op").get("/").content.decode()
    card = html[html.index(f'id="item-a-{approval.pk}"') :]
    card = card[: card.index("</article>")]
    assert "escalated to admins</strong>, expires" in card and "then denied" in card
    assert f'action="/approvals/{approval.pk}/approve/"' in card  # an admin may decide


def test_after_escalation_the_card_hides_the_buttons_below_the_role(waiting, as_user):
    """bob sees the card without decision forms, told it needs the admin role now."""
    approval = escalated(waiting)
    html = as_user("bob").get("/").content.decode()
    card = html[html.index(f'id="item-a-{approval.pk}"') :]
    card = card[: card.index("</article>")]
    assert "deciding it now takes the admin role" in card
    assert f'action="/approvals/{approval.pk}/approve/"' not in card


def test_the_audit_page_says_what_the_deadlines_did(waiting, as_user):
    """The chain page puts the warning, the escalation and the expiry into words."""
    approval = warn_window(waiting)
    approvals_warn()
    approval = shift(escalated(approval), timedelta(hours=1, minutes=1))
    approvals_expire()
    html = as_user("op").get("/audit/t1/").content.decode()
    assert "Warned: place_order expires at" in html and "then to admins." in html
    assert "Deadline passed: place_order escalated to admins, who have until" in html
    assert "Deadline passed: place_order denied (fail closed)." in html


@pytest.mark.parametrize("sweep", ["warn", "expire"])
def test_sweepers_at_the_same_instant_act_once(waiting, sweep):
    """Four workers sweep together: one warning, or one escalation, in the chain; none fails."""

    approval = warn_window(waiting) if sweep == "warn" else shift(waiting, timedelta(hours=4, minutes=1))
    swept = approvals_warn if sweep == "warn" else approvals_expire
    counts = all_returned(at_once([swept] * 4))
    assert sorted(counts) == [0, 0, 0, 1]
    kind = "approval.expiring" if sweep == "warn" else "approval.escalated"
    assert len(chain(kind)) == 1
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_deciding_after_the_deadline_denied_it_says_it_expired(waiting, people, as_user):
    """Once the sweeper expired it, the API answers approval_expired and the card says it expired.

    Not "already settled by expired": the deadline is no person, and nothing else settled it.
    """
    approval = shift(escalated(waiting), timedelta(hours=1, minutes=1))
    assert approvals_expire() == 1
    response = key_for(people, "op").post(
        f"/approvals/{approval.pk}/approve", {"arguments_hash": approval.arguments_hash}
    )
    assert response.status_code == 409
    assert response.json() == {
        "code": "approval_expired",
        "detail": f"The approval expired before it was decided; the action was denied. ({approval.pk})",
    }
    card = as_user("op").post(f"/approvals/{approval.pk}/deny/", {"note": "too late"}, **HTMX)
    html = card.content.decode()
    assert card.status_code == 409 and "This approval expired: it is denied (fail closed)." in html
    assert "settled by" not in html and 'value="too late"' in html  # what was typed, shown again
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.EXPIRED
    assert len(chain("approval.decided")) == 0
