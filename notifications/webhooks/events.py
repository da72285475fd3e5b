"""Which audit events become which webhook events, and what each one says.

The audit chain records everything; a receiver wants to hear when something waits for
a person or has settled. Each mapped event names its tenant, run, action and tool and
links to the run's console page. It never carries the call's arguments: the payload
builder (:func:`notifications.webhooks.messages.webhook_payload`) adds them only for an endpoint whose
tenant opted in.

=====================  =============================================================
webhook event          audit kinds
=====================  =============================================================
approval.requested     ``approval.requested``
approval.expiring      ``approval.expiring`` (the approval expires soon, no decision yet)
approval.decided       ``approval.decided``, ``approval.edited``, ``approval.expired``;
                       ``verdict`` says approved, denied, edited or expired
approval.escalated     ``approval.escalated`` (passed through)
outcome.unknown        ``gateway.call`` with status ``unknown``
outcome.settled        ``loop.reconciled``; ``verdict`` says executed or not_executed
run.finished           ``run.status`` to done, cancelled or stopped (the one writer of a
                       run's status writes it once per stop, so nothing finishes twice);
                       ``outcome`` says what happened (``runs.outcomes``), ``reason``
                       why the loop stopped
=====================  =============================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

EVENT_TYPES = (
    "approval.requested",
    "approval.expiring",
    "approval.decided",
    "approval.escalated",
    "outcome.unknown",
    "outcome.settled",
    "run.finished",
)
"""Every type a webhook may carry; an endpoint's filter names some of these (none: all)."""

TEST_EVENT_TYPE = "webhook.test"
"""What an admin's test message is: sent whatever the endpoint's filter, never drawn from the chain."""

AUDIT_KINDS = frozenset(
    {
        "approval.requested",
        "approval.expiring",
        "approval.decided",
        "approval.edited",
        "approval.expired",
        "approval.escalated",
        "gateway.call",
        "loop.reconciled",
        "run.status",
    }
)
"""The audit kinds :func:`webhook_event` may map: the only ones the channel reads from the chain."""

FINISHED_STATUSES = {"done": False, "cancelled": False, "stopped": True}
"""A run's final statuses and whether a person may still resume it (a budget stop or an error)."""

_SCALAR = (str, int, float, bool, type(None))
_NEVER_PASSED = {"arguments", "edited_arguments", "idempotency_key", "original_hash", "edited_hash"}
"""Body fields a passed-through event never carries: the call's arguments and what derives from them."""


@dataclass(frozen=True)
class WebhookEvent:
    """One webhook event drawn from one audit event: its type and its ``data`` fields."""

    type: str
    data: dict[str, Any]

    @property
    def run_id(self) -> str | None:
        """The run the event is about."""
        value = self.data.get("run_id")
        return value if isinstance(value, str) else None

    @property
    def action_id(self) -> str | None:
        """The action the event is about, if any (a run's finish has none)."""
        value = self.data.get("action_id")
        return value if isinstance(value, str) else None


def webhook_event(kind: str, actor: str, body: dict[str, Any]) -> WebhookEvent | None:
    """The webhook event for one audit event, or None if receivers need not hear of it."""
    subject = {"run_id": _text(body.get("run_id")), "action_id": _text(body.get("action_id"))}
    subject["tool"] = _text(body.get("tool"))
    if kind == "approval.requested":
        return WebhookEvent(kind, {**subject, "required_approvals": body.get("required", 1)})
    if kind == "approval.expiring":
        data = {**subject, "expires_at": _text(body.get("expires_at"))}
        if isinstance(body.get("escalates_to"), str):
            data["escalates_to"] = body["escalates_to"]  # the deadline hands it to this role
        return WebhookEvent(kind, data)
    if kind == "approval.decided":
        decision = body.get("decision")
        if decision == "deny":
            return _decided(subject, "denied", actor, note=body.get("note", ""))
        approvals, required = body.get("approvals", 1), body.get("required", 1)
        granted = isinstance(approvals, int) and isinstance(required, int) and approvals >= required
        return _decided(
            subject,
            "approved" if granted else "approval_recorded",
            actor,
            note=body.get("note", ""),
            approvals=approvals,
            required_approvals=required,
        )
    if kind == "approval.edited":
        return _decided(
            subject,
            "edited",
            actor,
            note=body.get("note", ""),
            new_action_id=_text(body.get("new_action_id")),
            changed_fields=[f for f in body.get("changed", []) if isinstance(f, str)],
        )
    if kind == "approval.expired":
        return _decided(subject, "expired", None)  # nobody decided: the time ran out
    if kind == "approval.escalated":
        extra = {k: v for k, v in body.items() if k not in _NEVER_PASSED and isinstance(v, _SCALAR)}
        return WebhookEvent(kind, {**extra, **subject})
    if kind == "gateway.call" and body.get("status") == "unknown":
        return WebhookEvent("outcome.unknown", {**subject, "code": _text(body.get("code"))})
    if kind == "loop.reconciled":
        return WebhookEvent(
            "outcome.settled",
            {
                **subject,
                "verdict": _text(body.get("verdict")),
                "source": _text(body.get("source")),
                "by": actor,
            },
        )
    if kind == "run.status" and body.get("status") in FINISHED_STATUSES:
        status = str(body["status"])
        return WebhookEvent(
            "run.finished",
            {
                **subject,
                "status": status,
                "outcome": _text(body.get("outcome")),  # None in an event older than outcomes
                "reason": _text(body.get("reason")),
                "resumable": FINISHED_STATUSES[status],
            },
        )
    return None


def _decided(subject: dict[str, Any], verdict: str, actor: str | None, **extra: Any) -> WebhookEvent:
    return WebhookEvent("approval.decided", {**subject, "verdict": verdict, "by": actor, **extra})


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
