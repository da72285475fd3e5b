"""The stable management commands: tenants, operators, the demo and the paper ledger."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from approvals.models import Approval, UnknownOutcome
from runs.models import Run
from tenants.models import Membership, Tenant


def run(*args, **kwargs) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **kwargs)
    return out.getvalue()


def test_keelgate_tenant_creates_once(transactional_db):
    """keelgate_tenant creates a tenant if missing and is a no-op the second time."""
    assert "created" in run("keelgate_tenant", "acme")
    assert "exists" in run("keelgate_tenant", "acme")
    assert Tenant.objects.filter(slug="acme").count() == 1
    with pytest.raises(CommandError):
        run("keelgate_tenant", "Not A Slug!")


def test_keelgate_operator_creates_the_user_and_sets_the_role(transactional_db):
    """A new operator gets a printed password; running again changes the role only."""
    run("keelgate_tenant", "acme")
    out = run("keelgate_operator", "ann", tenant="acme", role="approver")
    assert "password: " in out
    run("keelgate_operator", "ann", tenant="acme", role="reconciler")
    membership = Membership.objects.get(user__username="ann")
    assert membership.role == "reconciler"
    with pytest.raises(CommandError):
        run("keelgate_operator", "ann", tenant="missing", role="viewer")


def test_keelgate_demo_is_idempotent_and_leaves_an_unknown_outcome(brokerage_path, transactional_db):
    """The demo makes tenant demo, an admin operator, runs, and exactly one unknown outcome;
    a password it was given is never echoed (keelgate_serve's output is a log)."""
    out = run("keelgate_demo", password="pw-demo-12345")
    assert "login: operator (the password given)" in out and "pw-demo-12345" not in out
    assert get_user_model().objects.get(username="operator").check_password("pw-demo-12345")
    runs = Run.objects.filter(tenant_id="demo").count()
    assert runs == 3
    assert UnknownOutcome.objects.filter(tenant_id="demo", settled=False).count() == 1
    run("keelgate_demo")
    assert Run.objects.filter(tenant_id="demo").count() == runs
    assert Approval.objects.filter(tenant_id="demo").count() == 1


def test_paper_ledger_lists_every_key_with_executions_and_replays(brokerage_path, transactional_db):
    """paper_ledger --json prints one entry per idempotency key."""
    run("keelgate_demo", password="pw-demo-12345")
    entries = json.loads(run("paper_ledger", "--json"))
    assert len(entries) == 1
    assert entries[0]["executions"] == 1 and entries[0]["replays"] == 0
    assert "1 key(s)" in run("paper_ledger")
