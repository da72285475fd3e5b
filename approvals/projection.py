"""Keeps the inbox tables in step with a run's checkpoint.

Runs inside the transaction that saves the checkpoint (a ``checkpoint_saved``
receiver), so an inbox row exists exactly when the checkpoint says a person is needed.
It writes only what changed: a step without approvals or unknown outcomes costs no
query, and a decision's save rewrites just the one row it decided.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from keelgate.canonical import canonical_json, canonical_sha256
from keelgate.gateway import SideEffect
from keelgate.loop import ActionStatus, LoopState, PlannedAction
from sitekit.db import db_values, insert_sql, update_sql

Send = Callable[[str, Sequence[Any]], None]
"""Sends one write into the saving transaction (``checkpoint_saved``'s ``send``)."""

_SETTLED = (ActionStatus.DONE, ActionStatus.ABANDONED)

_HELD: ContextVar[Approval | None] = ContextVar("held_approval", default=None)


@contextmanager
def holding(row: Approval) -> Iterator[None]:
    """Within: ``row`` is the stored approval as it is, locked by the caller's transaction.

    A decision locks its row, then the engine saves the run and this projection runs: it
    compares with ``row`` instead of reading it again, and sets on ``row`` what it writes,
    so the decision answers with the row as stored without reading it back either.
    """
    token = _HELD.set(row)
    try:
        yield
    finally:
        _HELD.reset(token)


def sync_inbox(state: LoopState, send: Send) -> None:
    """Create or update the inbox rows for the state's waiting and settled actions.

    The approval rows go through ``send``: the checkpoint store's, which on PostgreSQL
    joins them to the message that saves the checkpoint (no round trip of their own,
    and none of the ORM's building of each statement).
    """
    approvals = {a.action_id: _approval_fields(state, a) for a in state.actions if a.approval is not None}
    unknowns = {
        a.action_id: a
        for a in state.actions
        if a.status is ActionStatus.UNKNOWN or (a.outcome.settled_by and a.status in _SETTLED)
    }
    if approvals:
        _sync_approvals(state, approvals, send)
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


def _sync_approvals(state: LoopState, wanted: dict[str, dict[str, Any]], send: Send) -> None:
    """A held row is compared here; any other is written by two sent statements that need
    no answer: an insert that leaves an existing row alone, then an update that matches
    the row only where a field differs.

    So a save reads nothing from the inbox (on PostgreSQL its rows go in the message that
    saves the checkpoint, with no round trip of their own), and an unchanged row is
    neither rewritten nor locked: the update's condition is false on it, so it does not
    wait for, or hold up, a decision that has that row locked.
    """
    held = _HELD.get()
    for action_id, fields in wanted.items():
        if held is not None and (held.tenant_id, held.run_id, held.action_id) == (
            state.tenant_id,
            state.run_id,
            action_id,
        ):
            changed = {name: value for name, value in fields.items() if getattr(held, name) != value}
            if changed:
                send(update_sql(Approval, tuple(changed), ("id",)), [*db_values(Approval, changed), held.pk])
                for name, value in changed.items():  # a held row stays what is stored
                    setattr(held, name, value)
            continue
        key = {"tenant_id": state.tenant_id, "run_id": state.run_id, "action_id": action_id}
        names = tuple(fields)
        values = db_values(Approval, fields)
        send(insert_sql(Approval, (*key, *names), _KEEP_EXISTING), [*key.values(), *values])
        send(update_sql(Approval, names, tuple(key), if_changed=True), [*values, *key.values(), *values])


_KEEP_EXISTING = ' ON CONFLICT ("tenant_id", "run_id", "action_id") DO NOTHING'
"""An approval's row exists once per action (``approval_per_action``): inserted once."""


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
