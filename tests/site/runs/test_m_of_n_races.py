"""M-of-N (M = 3) under races and a process death, as four-eyes is in test_concurrent_decisions.

Three people approving at the same instant: the row lock orders them, every vote counts
once, exactly one of them is the third and moves the run forward, and the order runs
once. Four people racing for the last vote: one takes it, the others are told who did.
A process SIGKILLed between the 2nd vote's commit and the 3rd vote's commit: the two
committed votes stand, the third left nothing, and a third person finishes it later.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from audit.selectors import audit_verify
from keelgate.errors import AlreadyDecidedError
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_start
from tenants.models import Membership, Role, Tenant
from tests.site._audit import logged
from tests.site._threads import at_once

ROOT = Path(__file__).resolve().parents[3]
AGENT = "tests.site.console.agents.build_three_of_n"


@pytest.fixture
def people(operator, brokerage_path, settings):
    """Five approvers of t1, and the three-of-n agent."""
    settings.KEELGATE_AGENTS = {**settings.KEELGATE_AGENTS, "three-of-n": AGENT}
    tenant = Tenant.objects.get(slug="t1")
    users = []
    for name in ("ann", "bob", "cal", "dan", "eve"):
        user = get_user_model().objects.create_user(name)
        Membership.objects.create(user=user, tenant=tenant, role=Role.APPROVER)
        users.append(user)
    return users


def waiting(operator, run_id: str) -> Approval:
    """A three-of-n run stopped on its order's approval."""
    run_start(tenant_id="t1", agent="three-of-n", goal="buy 3 GAMMA", user=operator, run_id=run_id)
    drain()
    approval = Approval.objects.get(tenant_id="t1", run_id=run_id)
    assert approval.status == ApprovalStatus.PENDING and approval.required == 3
    return approval


def drain() -> None:
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass


def approve(approval_id: int, user) -> Approval:
    return approval_decide(tenant_id="t1", approval_id=approval_id, user=user, decision="approve")


def queued_moves(run_id: str) -> int:
    """How many times the run was moved to queued (the decision's forward)."""
    return sum(
        1
        for e in logged().filter(kind="run.status", run_id=run_id)
        if json.loads(e.body)["status"] == RunStatus.QUEUED
    )


@pytest.mark.parametrize("round_", range(2))
def test_three_people_approving_at_once_all_count_and_one_moves_it_forward(operator, people, round_):
    """Three votes, three events numbered 1, 2, 3; one queued move; the order runs once."""
    run_id = f"m3-{round_}"
    approval = waiting(operator, run_id)
    before = queued_moves(run_id)
    outcomes = at_once([functools.partial(approve, approval.pk, u) for u in people[:3]], timeout=120)
    assert all(isinstance(o, Approval) for o in outcomes), outcomes
    assert sorted(o.status for o in outcomes) == ["approved", "pending", "pending"]
    row = Approval.objects.get(pk=approval.pk)
    assert row.status == ApprovalStatus.APPROVED and sorted(row.approved_by) == ["ann", "bob", "cal"]
    decided = logged().filter(kind="approval.decided", run_id=run_id).order_by("seq")
    assert [json.loads(e.body)["approvals"] for e in decided] == [1, 2, 3]
    assert decided.last().actor == row.decided_by
    assert queued_moves(run_id) == before + 1
    history = DjangoCheckpointStore().history("t1", run_id)
    asked = [s.action(approval.action_id) for s in history]
    votes = [len(a.approval.approvals) for a in asked if a is not None and a.approval is not None]
    counts = [n for i, n in enumerate(votes) if i == 0 or n != votes[i - 1]]
    assert counts == [0, 1, 2, 3], f"each vote saved once, in turn: {votes}"
    drain()
    assert Run.objects.get(tenant_id="t1", run_id=run_id).status == RunStatus.DONE
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]
    assert audit_verify(tenant_id="t1").ok


def test_four_people_racing_for_the_last_vote_one_takes_it(operator, people):
    """Two approved; four more at once: one is the third, three are told who settled it."""
    approval = waiting(operator, "m3-last")
    approve(approval.pk, people[0])
    approve(approval.pk, people[1])
    racers = [people[2], people[3], people[4], operator]
    outcomes = at_once([functools.partial(approve, approval.pk, u) for u in racers], timeout=120)
    won = [o for o in outcomes if isinstance(o, Approval)]
    lost = [o for o in outcomes if not isinstance(o, Approval)]
    assert len(won) == 1 and won[0].status == ApprovalStatus.APPROVED, outcomes
    assert all(isinstance(o, AlreadyDecidedError) for o in lost), outcomes
    assert {o.detail for o in lost} == {won[0].decided_by}
    row = Approval.objects.get(pk=approval.pk)
    assert len(row.approved_by) == 3 and row.approved_by[:2] == ["ann", "bob"]
    drain()
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]


# The child votes as ann and bob (each its own committed decision), then starts cal's
# vote and is SIGKILLed inside its transaction, after the engine saved the third vote and
# just before the run's move and the commit.
CHILD = """
import os, signal, sys
import django
django.setup()
from django.conf import settings
settings.KEELGATE_AGENTS = {**settings.KEELGATE_AGENTS, "three-of-n": sys.argv[2]}
from django.contrib.auth import get_user_model
import approvals.services
from approvals.services import approval_decide
users = get_user_model().objects
pk = int(sys.argv[1])
for name in ("ann", "bob"):
    approval_decide(tenant_id="t1", approval_id=pk, user=users.get(username=name), decision="approve")
print("two votes committed", flush=True)

def killed(**kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

approvals.services.run_requeue = killed
approval_decide(tenant_id="t1", approval_id=pk, user=users.get(username="cal"), decision="approve")
print("not killed", flush=True)
"""


def test_a_kill_between_the_second_vote_and_the_third_loses_no_vote_and_runs_nothing(
    operator, people, child_env
):
    """SIGKILL inside the 3rd vote's transaction: ann's and bob's votes stand, cal's left nothing,
    nothing ran; dan's approval then completes it and the order runs once."""
    approval = waiting(operator, "m3-kill")
    before = DjangoCheckpointStore().load("t1", "m3-kill").seq
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(approval.pk), AGENT],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert "two votes committed" in child.stdout and "not killed" not in child.stdout
    row = Approval.objects.get(pk=approval.pk)
    assert row.status == ApprovalStatus.PENDING and row.approved_by == ["ann", "bob"] and row.remaining == 1
    state = DjangoCheckpointStore().load("t1", "m3-kill")
    assert state.seq == before + 2
    assert [v.by for v in state.action(approval.action_id).approval.approvals] == ["ann", "bob"]
    assert Run.objects.get(tenant_id="t1", run_id="m3-kill").status == RunStatus.WAITING
    decided = logged().filter(kind="approval.decided", run_id="m3-kill")
    assert sorted(e.actor for e in decided) == ["ann", "bob"]
    drain()
    assert PaperBrokerage().ledger() == []

    done = approve(approval.pk, people[3])
    assert done.status == ApprovalStatus.APPROVED and done.approved_by == ["ann", "bob", "dan"]
    drain()
    assert Run.objects.get(tenant_id="t1", run_id="m3-kill").status == RunStatus.DONE
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]
    assert audit_verify(tenant_id="t1").ok
