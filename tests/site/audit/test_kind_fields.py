"""Every body field written to the chain is one its kind lists in ``audit.kinds``.

``test_kinds.py`` reads the fields a body names in the source; a body also gets fields
at run time that no source line names (the engine's ``call_fields``, a decision's
``DecisionContext.fields()``, the gateway's base body). So this test drives runs the way
people and workers do, through the console, the API, the worker and the sweeper, with
the arguments policy on for the tenant (so the optional fields are written too), then
reads the tenant's whole chain: a field its kind does not list fails it, naming the
kind and the field. It also checks that the drive still reaches the kinds it is meant
to, so that it cannot pass by writing nothing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client

from approvals.models import Approval, UnknownOutcome
from approvals.services import approvals_expire, approvals_warn
from audit.kinds import EVENT_KINDS
from audit.wiring import audit_log
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import RunStatus
from runs.services import run_move, run_start
from tenants.api_keys import api_key_create
from tenants.models import Tenant
from tests.site.api.conftest import Api

from .every_kind import BODIES

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}

DRIVEN = {
    "run.requested",
    "run.started",
    "run.status",
    "run.cancel_requested",
    "run.cancelled",
    "run.stopped",
    "loop.planned",
    "loop.reconciled",
    "gateway.call",
    "approval.requested",
    "approval.decided",
    "approval.edited",
    "approval.expiring",
    "approval.escalated",
    "approval.expired",
}
"""The kinds the drive below writes (the others are written by code it does not reach:
LangGraph agents, a monitor, a webhook's registration, a login lock-out)."""


def _drain() -> None:
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass


def _waiting(op, run_id: str, goal: str = "buy 10 ACME") -> Approval:
    run_start(tenant_id="t1", agent="paper-trader", goal=goal, user=op, run_id=run_id)
    _drain()
    return Approval.objects.get(tenant_id="t1", run_id=run_id)


def _shift(approval: Approval, by: timedelta) -> None:
    """Move the approval's request and deadlines ``by`` into the past (a newer checkpoint)."""
    store = DjangoCheckpointStore()
    state = store.load("t1", approval.run_id)
    held = state.action(approval.action_id).approval
    for name in ("requested_at", "expires_at", "escalated_at", "warned_at", "warned_for"):
        if getattr(held, name) is not None:
            setattr(held, name, getattr(held, name) - by)
    state.seq += 1
    with transaction.atomic():
        store.save(state)


def _drive(op, settings) -> None:
    """Approve, edit, deny, reconcile, cancel (waiting, queued and running), warn, escalate and
    expire, through the API (a key), the console (a session), the worker and the sweeper."""
    settings.KEELGATE_AUDIT_ARGUMENTS = ["*"]
    _, token = api_key_create(by="tester", tenant=Tenant.objects.get(slug="t1"), user=op, name="drive")
    api = Api(token)
    console = Client(REMOTE_ADDR="10.0.0.9")
    console.force_login(op)

    high = _waiting(op, "f1", goal="sell 150 ACME")
    assert (
        api.post(
            f"/approvals/{high.pk}/approve",
            {"arguments_hash": high.arguments_hash, "confirm_high_impact": True},
        ).status_code
        == 200
    )
    edited = _waiting(op, "f2")
    form = {"edit": "1", "arguments_hash": edited.arguments_hash, "note": "fewer", "arg.symbol": "ACME"}
    form.update({"arg.side": "buy", "arg.quantity": "4"})
    assert console.post(f"/approvals/{edited.pk}/approve/", form, **HTMX).status_code == 200
    denied = _waiting(op, "f3")
    assert api.post(f"/approvals/{denied.pk}/deny", {"note": "no"}).status_code == 200
    _drain()  # f1, f2 and f3 finish
    unknown = _waiting(op, "f4")
    assert console.post(f"/approvals/{unknown.pk}/approve/", {"note": ""}, **HTMX).status_code == 200
    PaperBrokerage().set_mode("fail")  # f4's order executes, then the brokerage fails
    _drain()
    PaperBrokerage().set_mode("normal")
    item = UnknownOutcome.objects.get(tenant_id="t1", run_id="f4")
    settle = {"executed": "no", "note": "not in the ledger"}
    assert console.post(f"/unknown/{item.pk}/reconcile/", settle, **HTMX).status_code == 200
    _waiting(op, "f5")
    assert api.post("/runs/f5/cancel", {"note": "stop"}).status_code == 200
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=op, run_id="f6")
    assert console.post("/runs/t1/f6/cancel/", {"note": "never mind", "confirm": "yes"}).status_code == 303
    _waiting(op, "f7")
    run_move(tenant_id="t1", run_id="f7", to=RunStatus.RUNNING, actor="drive", reason="claimed")
    assert api.post("/runs/f7/cancel", {"note": "stop it"}).status_code == 200
    late = _waiting(op, "f8")
    _shift(late, timedelta(hours=3, minutes=40))
    assert approvals_warn() == 1
    _shift(late, timedelta(minutes=21))
    assert approvals_expire() == 1  # escalated to an admin
    _shift(late, timedelta(hours=1, minutes=1))
    assert approvals_expire() == 1  # denied, fail closed


def test_every_field_written_in_a_drive_is_listed_for_its_kind(operator, brokerage_path, settings):
    """The drive writes the kinds it should; no body of any event holds a field its kind does not list."""
    _drive(operator, settings)
    written = list(audit_log().events("t1"))
    assert {e.kind for e in written} >= DRIVEN
    strays = sorted(
        {(e.kind, field) for e in written for field in e.body if field not in EVENT_KINDS[e.kind].fields}
    )
    assert strays == [], "fields written but missing from their kind's fields in audit/kinds.py"
    decided = [e.body for e in written if e.kind == "approval.decided"]
    assert {"arguments", "impact", "high_impact_confirmed", "via", "key_id", "address"} <= {
        field for body in decided for field in body
    }  # the optional fields were really written, and so checked


def test_the_shared_example_bodies_use_listed_fields_only():
    """``every_kind.BODIES`` (the audit page's and the browser suite's examples) lists only real fields."""
    for kind, body in BODIES.items():
        assert set(body) <= set(EVENT_KINDS[kind].fields), kind


def test_every_kind_lists_its_fields_each_with_a_meaning():
    """Every kind lists at least one field, and every field says what it is in one line."""
    for kind in EVENT_KINDS.values():
        assert kind.fields, kind.name
        for name, meaning in kind.fields.items():
            assert meaning.strip() and "\n" not in meaning, (kind.name, name)
