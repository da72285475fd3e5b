"""Keeps the inbox tables in step with a run's checkpoint.

Runs inside the transaction that saves the checkpoint (a ``checkpoint_saved``
receiver), so an inbox row exists exactly when the checkpoint says a person is needed.
It writes only what changed: a step without approvals or unknown outcomes costs no
query, and a decision's save rewrites just the one row it decided.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from keelgate.canonical import canonical_json, canonical_sha256
from keelgate.gateway import SideEffect
from keelgate.loop import ActionStatus, LoopState, PlannedAction
from sitekit.commits import RowWriter

_SETTLED = (ActionStatus.DONE, ActionStatus.ABANDONED)


def sync_inbox(state: LoopState, writer: RowWriter, *, held: Approval | None = None) -> None:
    """Create or update the inbox rows for the state's waiting and settled actions.

    The approval rows go through ``writer``, the saving transaction's, which on
    PostgreSQL joins them to the message that saves the checkpoint (no round trip of
    their own). ``held`` is the stored approval as it is, locked by a deciding service:
    compared with instead of read again, and set to what is written, so the decision
    answers with the row as stored without reading it back either.
    """
    approvals = {a.action_id: _approval_fields(state, a) for a in state.actions if a.approval is not None}
    unknowns = {
        a.action_id: a
        for a in state.actions
        if a.status is ActionStatus.UNKNOWN or (a.outcome.settled_by and a.status in _SETTLED)
    }
    if approvals:
        _sync_approvals(state, approvals, writer, held)
    if unknowns:
        _sync_unknowns(state, unknowns)


def _approval_fields(state: LoopState, action: PlannedAction) -> dict[str, Any]:
    approval = action.approval
    assert approval is not None
    status = ApprovalStatus.PENDING
    decided_by, decided_at = "", None
    if approval.withdrawn:
        status, decided_by = ApprovalStatus.WITHDRAWN, action.outcome.settled_by or ""
        decided_at = action.outcome.at
    elif approval.expired:
        status = ApprovalStatus.EXPIRED
    elif approval.denied_by:
        status, decided_by, decided_at = ApprovalStatus.DENIED, approval.denied_by, approval.denied_at
    elif approval.granted:
        status = ApprovalStatus.APPROVED
        decided_by, decided_at = approval.approvals[-1].by, approval.approvals[-1].at
    return {
        "agent": state.agent_id,
        "tool": action.tool,
        "arguments": canonical_json(action.arguments),
        "reason": approval.reason,
        "required": approval.required,
        "approver_roles": list(approval.approver_roles),
        "votes": [v.model_dump(mode="json") for v in approval.approvals],
        "status": status,
        "requested_at": approval.requested_at,
        "expires_at": approval.expires_at,
        "decided_by": decided_by,
        "decided_at": decided_at,
        "note": approval.note,
        "arguments_hash": approval.arguments_hash or canonical_sha256(action.arguments),
        "goal": state.goal,
        "observations": [
            {"tool": a.tool, "output": a.outcome.output}
            for a in state.actions
            if a.iteration == action.iteration
            and a.side_effect is SideEffect.READ
            and a.status is ActionStatus.DONE
            and a.outcome.output is not None
        ],
        "impact": approval.impact,
        "high_impact": approval.high_impact,
        "edit_of": approval.edit_of or "",
        "replaced_by": approval.replaced_by or "",
        "escalates_to": approval.escalates_to or "",
        "escalated_to": approval.escalated_to or "",
        "warn_at": approval.warn_at,
        "warned_at": approval.warned_at if approval.warned_for == approval.expires_at else None,
    }


def _sync_approvals(
    state: LoopState, wanted: dict[str, dict[str, Any]], writer: RowWriter, held: Approval | None
) -> None:
    """A held row is compared here; any other is written by two writes that need no
    answer: an insert that leaves an existing row alone, then an update that matches
    the row only where a field differs.

    So a save reads nothing from the inbox (on PostgreSQL its rows go in the message that
    saves the checkpoint, with no round trip of their own), and an unchanged row is
    neither rewritten nor locked: the update's condition is false on it, so it does not
    wait for, or hold up, a decision that has that row locked.
    """
    for action_id, fields in wanted.items():
        if held is not None and (held.tenant_id, held.run_id, held.action_id) == (
            state.tenant_id,
            state.run_id,
            action_id,
        ):
            changed = {name: value for name, value in fields.items() if getattr(held, name) != value}
            if changed:
                writer.update(held, changed)  # the held row stays what is stored
            continue
        # An approval's row exists once per action (``approval_per_action``): inserted once.
        key = {"tenant_id": state.tenant_id, "run_id": state.run_id, "action_id": action_id}
        writer.insert_missing(Approval, key, fields)
        writer.update_changed(Approval, key, fields)


def _sync_unknowns(state: LoopState, actions: dict[str, PlannedAction]) -> None:
    rows = UnknownOutcome.objects.filter(
        tenant_id=state.tenant_id, run_id=state.run_id, action_id__in=list(actions)
    )
    existing = {row.action_id: row for row in rows}
    missing = []
    for action_id, action in actions.items():
        row = existing.get(action_id)
        if action.status is ActionStatus.UNKNOWN:
            if row is None:
                missing.append(
                    UnknownOutcome(
                        tenant_id=state.tenant_id,
                        run_id=state.run_id,
                        action_id=action_id,
                        agent=state.agent_id,
                        tool=action.tool,
                        arguments=canonical_json(action.arguments),
                        idempotency_key=action.idempotency_key,
                        code=action.outcome.code or "",
                        detected_at=action.outcome.at or state.updated_at or timezone.now(),
                    )
                )
        elif row is not None and not row.settled:
            UnknownOutcome.objects.filter(pk=row.pk, settled=False).update(
                settled=True,
                settled_by=action.outcome.settled_by,
                settled_at=action.outcome.at,
                executed=action.status is ActionStatus.DONE,
                note=action.outcome.detail,
            )
    if missing:
        UnknownOutcome.objects.bulk_create(missing)
