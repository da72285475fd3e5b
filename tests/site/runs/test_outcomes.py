"""A run's outcome: the rule (``runs.outcomes.run_outcome``), its words, the one writer that
stores it with the status, and the migration that computes it for runs that ended before."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from audit.presentation import event_words
from keelgate.checkpoint import CheckpointCodec
from keelgate.gateway import SideEffect
from keelgate.loop import ActionOutcome, ActionStatus, ApprovalState, ApprovalVote, LoopState, PlannedAction
from runs.models import Run, RunStatus
from runs.outcomes import ENDED, RunOutcome, edits_of, run_outcome
from runs.presentation import OUTCOME_WORDS, edit_words
from runs.services import run_move, run_resume, run_start
from tests.site._audit import logged

AT = datetime(2026, 12, 1, tzinfo=UTC)


def _call(
    action_id: str,
    status: ActionStatus,
    *,
    side_effect: SideEffect = SideEffect.WRITE,
    arguments: dict[str, Any] | None = None,
    code: str | None = None,
    **approval: Any,
) -> PlannedAction:
    return PlannedAction(
        action_id=action_id,
        iteration=1,
        tool="place_order" if side_effect is not SideEffect.READ else "get_quote",
        arguments=arguments or {"symbol": "ACME", "quantity": 20},
        idempotency_key=f"k-{action_id}",
        side_effect=side_effect,
        outcome=ActionOutcome(status=status, code=code),
        approval=ApprovalState(requested_at=AT, **approval) if approval else None,
    )


def _state(*actions: PlannedAction) -> LoopState:
    return LoopState(
        tenant_id="t1", run_id="r", agent_id="a", goal="g", as_of=AT, trace_id="t", actions=list(actions)
    )


QUOTE = _call("q", ActionStatus.DONE, side_effect=SideEffect.READ)
DONE = _call("a1", ActionStatus.DONE)
DENIED = _call("a2", ActionStatus.DENIED, code="approval_denied", denied_by="bob", note="no")
EXPIRED = _call("a3", ActionStatus.DENIED, code="approval_expired", expired=True)
REFUSED = _call("a4", ActionStatus.DENIED, code="tool_not_granted")
ABANDONED = _call("a5", ActionStatus.ABANDONED)
ERROR = _call("a6", ActionStatus.ERROR, code="tool_rejected")
REPLACED = _call("a7", ActionStatus.DENIED, code="approval_denied", denied_by="alice", replaced_by="a7.e1")
EDITED = _call(
    "a7.e1",
    ActionStatus.DONE,
    arguments={"symbol": "ACME", "quantity": 15},
    edit_of="a7",
    approvals=[ApprovalVote(by="alice", at=AT)],
)


@pytest.mark.parametrize(
    ("actions", "outcome"),
    [
        ((), RunOutcome.COMPLETED),
        ((QUOTE,), RunOutcome.COMPLETED),
        ((QUOTE, DONE), RunOutcome.COMPLETED),
        ((QUOTE, DENIED), RunOutcome.DENIED),
        ((EXPIRED,), RunOutcome.DENIED),
        ((REFUSED,), RunOutcome.DENIED),
        ((ABANDONED,), RunOutcome.ABANDONED_UNKNOWN_OUTCOME),
        ((ERROR,), RunOutcome.FAILED),
        ((DONE, ERROR, ABANDONED, DENIED), RunOutcome.DENIED),
        ((ERROR, ABANDONED), RunOutcome.ABANDONED_UNKNOWN_OUTCOME),
        ((REPLACED, EDITED), RunOutcome.COMPLETED_WITH_EDIT),
        ((REPLACED, EDITED, DENIED), RunOutcome.DENIED),
        (
            (_call("p", ActionStatus.DENIED, side_effect=SideEffect.PROPOSE, denied_by="bob"),),
            RunOutcome.DENIED,
        ),
    ],
)
def test_a_done_run_is_named_by_what_became_of_its_writes(actions, outcome):
    """Reads never count; an edited-away proposal never counts; denied, abandoned, failed in that order."""
    assert run_outcome(status=RunStatus.DONE, stop_reason="goal_reached", state=_state(*actions)) == outcome


@pytest.mark.parametrize(
    ("status", "stop_reason", "outcome"),
    [
        (RunStatus.STOPPED, "max_iterations", RunOutcome.BUDGET_STOP),
        (RunStatus.STOPPED, "token_budget", RunOutcome.BUDGET_STOP),
        (RunStatus.STOPPED, "dollar_budget", RunOutcome.BUDGET_STOP),
        (RunStatus.STOPPED, "cost_unknown", RunOutcome.BUDGET_STOP),
        (RunStatus.STOPPED, "timeout", RunOutcome.BUDGET_STOP),
        (RunStatus.STOPPED, "verifier_rejected", RunOutcome.BUDGET_STOP),
        (RunStatus.STOPPED, "error", RunOutcome.FAILED),
        (RunStatus.STOPPED, "", RunOutcome.FAILED),
        (RunStatus.CANCELLED, "cancelled", RunOutcome.CANCELLED),
        (RunStatus.CANCELLED, "", RunOutcome.CANCELLED),
        (RunStatus.DONE, "goal_reached", RunOutcome.DENIED),  # read from its calls
        (RunStatus.QUEUED, "interrupted", ""),
        (RunStatus.RUNNING, "", ""),
        (RunStatus.WAITING, "approval_pending", ""),
        (RunStatus.WAITING, "outcome_unknown", ""),
    ],
)
def test_a_run_that_has_not_ended_has_no_outcome_and_a_stop_says_which_kind(status, stop_reason, outcome):
    """Budget stops (the engine's ``is_budget``) are budget_stop, any other stop failed; waiting is none."""
    assert run_outcome(status=status, stop_reason=stop_reason, state=_state(DENIED)) == outcome
    assert (outcome != "") == (status in ENDED)


def test_every_outcome_has_its_words_and_an_edit_is_told_field_by_field():
    """One badge, tone and meaning per outcome, badges distinct; the edit says who changed what."""
    assert set(OUTCOME_WORDS) == set(RunOutcome.values)
    assert len({w.badge for w in OUTCOME_WORDS.values()}) == len(RunOutcome.values)
    assert all(w.meaning and w.tone in ("ok", "bad") for w in OUTCOME_WORDS.values())
    (edit,) = edits_of(_state(REPLACED, EDITED))
    assert (edit.action_id, edit.replaces, edit.by) == ("a7.e1", "a7", "alice")
    assert edit_words(edit) == "alice changed quantity from 20 to 15"


def test_the_one_status_writer_stores_the_outcome_with_an_ending_move_only(operator):
    """An ending move needs its outcome (row and event); any other move refuses one and clears it."""
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id="m1")
    with pytest.raises(ValueError, match="needs its outcome"):
        run_move(tenant_id="t1", run_id="m1", to=RunStatus.DONE, actor="w")
    with pytest.raises(ValueError, match="needs its outcome"):
        run_move(tenant_id="t1", run_id="m1", to=RunStatus.STOPPED, actor="w", outcome="goal_reached")
    with pytest.raises(ValueError, match="has no outcome"):
        run_move(tenant_id="t1", run_id="m1", to=RunStatus.WAITING, actor="w", outcome="completed")
    assert Run.objects.get(run_id="m1").status == RunStatus.QUEUED
    assert run_move(tenant_id="t1", run_id="m1", to=RunStatus.STOPPED, actor="w", outcome="budget_stop")
    assert Run.objects.get(run_id="m1").outcome == "budget_stop"
    last = logged().filter(tenant_id="t1", kind="run.status").order_by("-seq").first()
    assert json.loads(last.body) == {"run_id": "m1", "status": "stopped", "outcome": "budget_stop"}
    run_resume(tenant_id="t1", run_id="m1", user=operator)
    assert Run.objects.get(run_id="m1").outcome == ""


def test_pages_survive_a_run_cancelled_before_it_started_and_an_outcome_this_version_does_not_know(
    operator,
):
    """No checkpoint: the cancel's note comes from the log; an unknown name shows as itself."""
    from django.test import Client

    from approvals.services import run_cancel

    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id="early")
    run_cancel(tenant_id="t1", run_id="early", user=operator, note="changed my mind")
    assert Run.objects.get(run_id="early").outcome == "cancelled"
    Run.objects.create(
        tenant_id="t1",
        run_id="odd",
        agent="paper-trader",
        goal="g",
        as_of=AT,
        status="done",
        outcome="later_name",
    )
    client = Client()
    client.force_login(operator)
    page = client.get("/runs/t1/early/").content.decode()
    assert 'data-outcome="cancelled"' in page and "Cancelled by op." in page and "changed my mind" in page
    assert 'data-outcome="later_name">later_name<' in client.get("/runs/t1/odd/").content.decode()
    listed = client.get("/runs/").content.decode()
    assert (
        'data-outcome="later_name">later_name<' in listed and 'data-outcome="cancelled">cancelled<' in listed
    )


def test_the_audit_page_says_the_outcome_of_an_ending_move():
    """The log's words for ``run.status`` name the outcome when the event carries one."""
    body = {"run_id": "r", "status": "done", "reason": "goal_reached", "outcome": "denied"}
    assert event_words("run.status", body) == "Run is now done (goal_reached); outcome denied."


# -- the migration ---------------------------------------------------------------------------


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.mark.django_db(transaction=True)
def test_the_migration_computes_the_outcome_of_every_run_that_ended_before():
    """From the latest checkpoint, stored old-style (JSON text) or deflated; runs still going get none."""
    old = migrate([("runs", "0006_apiidempotencykey")])
    try:
        runs, checkpoints = old.get_model("runs", "Run"), old.get_model("runs", "Checkpoint")
        codec = CheckpointCodec()
        made = {
            # run id: (status, stop reason, its latest state's actions or None for no checkpoint)
            "denied": ("done", "goal_reached", (QUOTE, DENIED)),
            "edited": ("done", "goal_reached", (REPLACED, EDITED)),
            "plain": ("done", "goal_reached", (QUOTE, DONE)),
            "budget": ("stopped", "max_iterations", (QUOTE,)),
            "error": ("stopped", "error", None),
            "cancelled": ("cancelled", "cancelled", None),
            "waiting": ("waiting", "approval_pending", (QUOTE, _call("w", ActionStatus.AWAITING_APPROVAL))),
        }
        for n, (run_id, (status, stop_reason, actions)) in enumerate(made.items()):
            runs.objects.create(
                tenant_id="t1",
                run_id=run_id,
                agent="a",
                goal="g",
                as_of=AT,
                status=status,
                stop_reason=stop_reason,
            )
            if actions is None:
                continue
            first = _state(QUOTE).model_copy(update={"run_id": run_id, "seq": 1})
            latest = _state(*actions).model_copy(update={"run_id": run_id, "seq": 2})
            if n % 2:  # the JSON as text, as before the encoding
                checkpoints.objects.create(
                    tenant_id="t1", run_id=run_id, seq=1, phase="plan", state=first.to_json()
                )
                checkpoints.objects.create(
                    tenant_id="t1", run_id=run_id, seq=2, phase="done", state=latest.to_json()
                )
            else:  # a keyframe and a delta against it
                for state in (first, latest):
                    encoded = codec.encode("t1", run_id, state.seq, state.to_json())
                    checkpoints.objects.create(
                        tenant_id="t1",
                        run_id=run_id,
                        seq=state.seq,
                        phase="done",
                        data=encoded.data,
                        base_seq=encoded.base_seq,
                    )
    finally:
        migrate([("runs", "0008_outcome_backfill")])
    got = dict(Run.objects.filter(tenant_id="t1").values_list("run_id", "outcome"))
    assert got == {
        "denied": "denied",
        "edited": "completed_with_edit",
        "plain": "completed",
        "budget": "budget_stop",
        "error": "failed",
        "cancelled": "cancelled",
        "waiting": "",
    }
