"""Run.status has one writer (runs.services.run_move), and every move is in the audit chain."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.db import transaction

from approvals.models import Approval
from approvals.services import approval_decide
from audit.selectors import audit_verify
from audit.wiring import audit_log
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_move, run_start

ROOT = Path(__file__).resolve().parents[3]
WRITES = {"update", "create", "update_or_create", "get_or_create", "bulk_update"}
APPS = ("sitekit", "tenants", "audit", "runs", "approvals", "keelgate_site")


def moves(run_id: str) -> list[tuple[str, str, str]]:
    """(actor kind, status, reason) of the run's ``run.status`` events, oldest first."""
    return [
        ("worker" if ":" in e.actor else e.actor, e.body["status"], e.body.get("reason", ""))
        for e in audit_log().events("t1")
        if e.kind == "run.status" and e.body["run_id"] == run_id
    ]


def test_a_run_through_the_worker_and_a_decision_leaves_every_move_in_the_chain(operator, brokerage_path):
    """Claimed, waiting, requeued by the approver, claimed again, done: five moves, five events."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 3 ACME", user=operator, run_id="m1")
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    approval = Approval.objects.get(run_id="m1")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
    while worker.run_once():
        pass
    assert Run.objects.get(run_id="m1").status == RunStatus.DONE
    assert moves("m1") == [
        ("worker", "running", "claimed"),
        ("worker", "waiting", "approval_pending"),
        ("op", "queued", "decided"),
        ("worker", "running", "claimed"),
        ("worker", "done", "goal_reached"),
    ]
    assert audit_verify(tenant_id="t1").ok


def test_a_move_whose_condition_no_longer_holds_writes_nothing(operator):
    """A stale expectation (another worker's epoch) changes no row and appends no event."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id="m2")
    before = audit_log().head("t1")
    assert not run_move(
        tenant_id="t1",
        run_id="m2",
        to=RunStatus.DONE,
        actor="w",
        outcome="completed",
        expect={"lease_epoch": 99},
    )
    assert Run.objects.get(run_id="m2").status == RunStatus.QUEUED
    assert audit_log().head("t1") == before


def test_a_move_and_its_event_roll_back_together(operator):
    """The move joins the caller's transaction: if that rolls back, neither the status nor the event stays."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id="m3")
    before = audit_log().head("t1")
    with pytest.raises(RuntimeError), transaction.atomic():
        assert run_move(tenant_id="t1", run_id="m3", to=RunStatus.STOPPED, actor="w", outcome="failed")
        raise RuntimeError("the caller failed after the move")
    assert Run.objects.get(run_id="m3").status == RunStatus.QUEUED
    assert audit_log().head("t1") == before


def _status_writes(path: Path) -> list[int]:
    """Lines writing a Run's status: ``Run.objects...update(status=..)`` and kin, or ``run.status =``."""
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            receiver = ast.get_source_segment(source, node.func.value) or ""
            writes_status = any(k.arg in ("status", "defaults") for k in node.keywords)
            if writes_status and receiver.startswith("Run."):
                lines.append(node.lineno)
        if isinstance(node, ast.Assign):
            lines.extend(
                node.lineno
                for target in node.targets
                if isinstance(target, ast.Attribute)
                and target.attr == "status"
                and isinstance(target.value, ast.Name)
                and target.value.id == "run"
            )
    return lines


def test_only_the_run_services_write_a_run_status():
    """Outside runs/services.py no module of the site writes ``status`` on a Run."""
    allowed = {ROOT / "runs" / "services.py"}
    offenders = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts or path in allowed:
                continue
            found = _status_writes(path)
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}
    assert _status_writes(ROOT / "runs" / "services.py"), "the detector must see the one writer"
