"""Keeps the inbox tables in step with a run's checkpoint.

Called by the checkpoint store inside the transaction that saves the checkpoint, so
an inbox row exists exactly when the checkpoint says a person is needed.
"""

from __future__ import annotations

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from keelgate._canonical import canonical_json
from keelgate.loop import ActionStatus, LoopState


def sync_inbox(state: LoopState) -> None:
    """Create or update the inbox rows for the state's waiting and settled actions."""
    for action in state.actions:
        approval = action.approval
        if approval is not None:
            status = ApprovalStatus.PENDING
            decided_by, decided_at = "", None
            if approval.expired:
                status = ApprovalStatus.EXPIRED
            elif approval.denied_by:
                status, decided_by, decided_at = ApprovalStatus.DENIED, approval.denied_by, approval.denied_at
            elif approval.granted:
                status = ApprovalStatus.APPROVED
                decided_by, decided_at = approval.approvals[-1].by, approval.approvals[-1].at
            Approval.objects.update_or_create(
                tenant_id=state.tenant_id,
                run_id=state.run_id,
                action_id=action.action_id,
                defaults={
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
                },
            )
        if action.status is ActionStatus.UNKNOWN:
            UnknownOutcome.objects.get_or_create(
                tenant_id=state.tenant_id,
                run_id=state.run_id,
                action_id=action.action_id,
                defaults={
                    "agent": state.agent_id,
                    "tool": action.tool,
                    "arguments": canonical_json(action.arguments),
                    "idempotency_key": action.idempotency_key,
                    "code": action.outcome.code or "",
                    "detected_at": action.outcome.at or state.updated_at,
                },
            )
        elif action.outcome.settled_by and action.status in (ActionStatus.DONE, ActionStatus.ABANDONED):
            UnknownOutcome.objects.filter(
                tenant_id=state.tenant_id, run_id=state.run_id, action_id=action.action_id, settled=False
            ).update(
                settled=True,
                settled_by=action.outcome.settled_by,
                settled_at=action.outcome.at,
                executed=action.status is ActionStatus.DONE,
                note=action.outcome.detail,
            )
