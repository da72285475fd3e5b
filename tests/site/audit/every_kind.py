"""One event of every kind the product writes, with the body its writer gives it.

Used by the Django tests of the audit page and API and by the browser suite's control
process. Free text (notes, tool names, hosts) carries markup, which every page must
show as text.
"""

from __future__ import annotations

from typing import Any

from audit.kinds import EVENT_KINDS

HOSTILE = "<script>window.__xss=1</script>"

RUN = "r-kinds"
ACTION = "a-1"
HASH = "ab" * 32
ORDER = {"symbol": "ACME", "side": "sell", "quantity": 150}

BODIES: dict[str, dict[str, Any]] = {
    "run.requested": {"run_id": RUN, "agent": "paper-trader"},
    "run.started": {"run_id": RUN, "loop_type": "task"},
    "run.status": {"run_id": RUN, "status": "waiting", "reason": "approval"},
    "run.resumed": {"run_id": RUN, "limits": {"max_iterations": 9}},
    "run.cancel_requested": {"run_id": RUN, "note": HOSTILE, "via": "console", "address": "10.0.0.5"},
    "run.cancelled": {
        "run_id": RUN,
        "note": "enough",
        "withdrawn": [ACTION],
        "withdrawn_calls": [{"action_id": ACTION, "tool": "place_order", "arguments_hash": HASH}],
        "via": "console",
        "address": "10.0.0.5",
    },
    "run.stopped": {"run_id": RUN, "reason": "goal_reached", "seq": 7, "error": None},
    "loop.planned": {
        "run_id": RUN,
        "iteration": 1,
        "actions": [{"action_id": ACTION, "tool": "place_order", "idempotency_key": "k-1"}],
    },
    "loop.reconciled": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": "place_order",
        "source": "human",
        "verdict": "not_executed",
        "note": "checked the ledger",
        "result_recorded": False,
        "arguments_hash": HASH,
        "via": "api",
        "key_id": "7",
        "address": "10.0.0.6",
    },
    "graph.interrupted": {"run_id": RUN, "action_id": ACTION, "tool": "place_order", "why": "approval"},
    "gateway.call": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": HOSTILE,
        "idempotency_key": "k-1",
        "status": "unknown",
        "code": "tool_outcome_unknown",
        "replayed": False,
        "arguments_hash": HASH,
    },
    "approval.standing_created": {
        "rule_id": 7,
        "agent": "paper-trader",
        "tool": HOSTILE,
        "bounds": {"quantity": {"max": 10}},
        "required": 1,
        "expires_at": "2030-01-01T00:00:00+00:00",
        "note": HOSTILE,
        "approval_id": 3,
    },
    "approval.standing_endorsed": {
        "rule_id": 7,
        "agent": "paper-trader",
        "tool": "place_order",
        "makers": ["ann", HOSTILE],
        "required": 2,
    },
    "approval.standing_edited": {
        "rule_id": 7,
        "agent": "paper-trader",
        "tool": "place_order",
        "expires_at": "2029-01-01T00:00:00+00:00",
        "bounds": {"quantity": {"max": 5}},
    },
    "approval.standing_used": {
        "rule_id": 7,
        "agent": "paper-trader",
        "tool": "place_order",
        "run_id": RUN,
        "action_id": ACTION,
        "approval_id": 3,
        "arguments_hash": HASH,
        "made_by": ["ann"],
    },
    "approval.standing_revoked": {
        "rule_id": 7,
        "agent": "paper-trader",
        "tool": "place_order",
        "note": HOSTILE,
        "uses": 1,
    },
    "approval.requested": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": "place_order",
        "idempotency_key": "k-1",
        "arguments_hash": HASH,
        "required": 2,
        "high_impact": True,
    },
    "approval.decided": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": "place_order",
        "decision": "approve",
        "approvals": 1,
        "required": 2,
        "note": "",
        "arguments_hash": HASH,
        "arguments": ORDER,
        "impact": "sell 150 ACME",
        "high_impact": True,
        "high_impact_confirmed": True,
        "via": "api",
        "key_id": "12",
        "address": "10.0.0.4",
    },
    "approval.edited": {
        "run_id": RUN,
        "action_id": ACTION,
        "new_action_id": "a-1.e1",
        "tool": "place_order",
        "original_hash": "0" * 64,
        "edited_hash": "1" * 64,
        "changed": ["quantity"],
        "note": "fewer",
        "arguments": ORDER,
        "edited_arguments": {**ORDER, "quantity": 100},
        "changes": {"quantity": {"old": 150, "new": 100}},
        "high_impact": True,
        "high_impact_confirmed": True,
        "via": "console",
        "address": "10.0.0.5",
    },
    "approval.expiring": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": "place_order",
        "expires_at": "2026-01-01T09:30:00+00:00",
        "escalates_to": "admin",
    },
    "approval.escalated": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": "place_order",
        "escalated_to": "admin",
        "expires_at": "2026-01-01T10:30:00+00:00",
        "previous_expires_at": "2026-01-01T09:30:00+00:00",
    },
    "approval.expired": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": "place_order",
        "idempotency_key": "k-1",
        "arguments_hash": HASH,
    },
    "approval.link_refused": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": HOSTILE,
        "link_id": 5,
        "reason": "not_yours",
        "recipient": "alice",
        "address": "10.0.0.7",
    },
    "webhook.registered": {
        "endpoint_id": 1,
        "host": "hooks.example.com",
        "events": ["approval.requested"],
        "include_arguments": False,
        "from_seq": 3,
    },
    "webhook.updated": {
        "endpoint_id": 1,
        "host": "hooks.example.com",
        "changed": ["description", "events"],
        "events": ["run.finished"],
        "include_arguments": False,
    },
    "webhook.secret_rotated": {
        "endpoint_id": 1,
        "host": "hooks.example.com",
        "grace_seconds": 86400,
        "previous_valid_until": "2026-01-02T09:00:00+00:00",
    },
    "webhook.disabled": {"endpoint_id": 1, "host": "hooks.example.com"},
    "webhook.enabled": {"endpoint_id": 1, "host": "hooks.example.com"},
    "webhook.deleted": {"endpoint_id": 1, "host": f"hooks.example.com{HOSTILE}", "deliveries": 3},
    "webhook.test_sent": {"endpoint_id": 1, "host": "hooks.example.com"},
    "webhook.redelivered": {
        "endpoint_id": 1,
        "host": "hooks.example.com",
        "message_id": "msg_t1_7",
        "event_type": "run.finished",
        "attempts": 2,
    },
    "member.added": {"username": HOSTILE, "role": "approver", "created_user": True, "reactivated": False},
    "member.invited": {
        "invitation_id": 4,
        "email": "new@example.com",
        "role": "viewer",
        "expires_at": "2026-01-04T09:30:00+00:00",
    },
    "member.joined": {"invitation_id": 4, "username": "newbie", "role": "viewer", "invited_by": "root"},
    "member.role_changed": {"username": "bob", "old_role": "viewer", "role": "admin"},
    "member.deactivated": {"username": "bob", "role": "admin"},
    "api_key.created": {"key_id": 3, "prefix": "0123456789ab", "name": HOSTILE, "username": "ci"},
    "api_key.revoked": {"key_id": 3, "prefix": "0123456789ab", "name": "ci key", "username": "ci"},
    "auth.signed_in": {"username": "bob", "address": "203.0.113.9"},
    "mcp.upstream_registered": {
        "upstream": f"mail{HOSTILE}",
        "created": True,
        "transport": "http",
        "target": "mcp.example.com",
        "policy_sha256": "ef" * 32,
        "via": "admin",
    },
    "slack.workspace_registered": {
        "team_id": "T0123",
        "channel": "C0123",
        "agent_channels": {"paper-trader": "C0456"},
        "token_env": "KEELGATE_SLACK_TOKEN",
        "secret_env": "KEELGATE_SLACK_SECRET",
        "created": True,
        "from_seq": 3,
    },
    "slack.linked": {"team_id": "T0123", "slack_user": "U0ALICE", "username": HOSTILE, "how": "code"},
    "slack.unlinked": {"team_id": "T0123", "slack_user": "U0ALICE", "username": "alice"},
    "slack.refused": {
        "run_id": RUN,
        "action_id": ACTION,
        "tool": HOSTILE,
        "team_id": "T0123",
        "slack_user": "U0MALLORY",
        "approval_id": 7,
        "arguments_hash": HASH,
        "action": "approve",
        "reason": "unlinked",
    },
    "auth.locked_out": {"username": "bob", "ip_address": "203.0.113.9"},
    "audit.retired": {
        "from_seq": 1,
        "to_seq": 49,
        "archive_name": f"acme-{HOSTILE}.json",
        "archive_sha256": "cd" * 32,
        "checkpoint_size": 60,
        "older_than_days": 183,
    },
}
"""A body for each kind of :data:`audit.kinds.EVENT_KINDS`, shaped as its writer shapes it."""

WORDS = {
    "member.role_changed": "bob's role changed from viewer to admin.",
    "member.deactivated": "bob (admin) deactivated.",
    "member.invited": "new@example.com invited as viewer; the link works once, until 2026-01-04 09:30 UTC.",
    "member.joined": "newbie joined as viewer (invited by root).",
    "api_key.revoked": "API key kg_0123456789ab_… “ci key”, acting as ci, revoked.",
    "auth.signed_in": "bob signed in from 203.0.113.9.",
    "auth.locked_out": "Login of bob locked out from 203.0.113.9.",
    "webhook.registered": "Webhook to hooks.example.com registered for approval.requested.",
    "webhook.secret_rotated": (
        "Signing secret of webhook #1 to hooks.example.com rotated; the old one also signs until"
        " 2026-01-02T09:00:00+00:00."
    ),
    "webhook.redelivered": "Webhook message msg_t1_7 (run.finished) to hooks.example.com sent again.",
    "mcp.upstream_registered": (
        f"MCP upstream mail{HOSTILE} registered (http to mcp.example.com) via the admin."
    ),
    "approval.decided": (
        "place_order approved (1 of 2): sell 150 ACME, high impact confirmed via API key 12 from 10.0.0.4."
    ),
    "approval.edited": (
        "place_order edited before approval: quantity 150 → 100, high impact confirmed in the console"
        ' from 10.0.0.5. Note: "fewer".'
    ),
    "loop.reconciled": (
        f"Outcome of place_order (arguments {HASH[:12]}…) settled: not executed (from human) via API key 7"
        ' from 10.0.0.6. Note: "checked the ledger".'
    ),
    "approval.link_refused": (
        f"Email link 5 (sent to alice) to decide {HOSTILE} opened by someone other than its recipient"
        " from 10.0.0.7: nothing was decided."
    ),
    "run.status": "Run is now waiting (approval).",
    "slack.unlinked": "Slack user U0ALICE of T0123 no longer acts as alice.",
    "slack.workspace_registered": (
        "Slack workspace T0123 registered: posts to C0123; token from KEELGATE_SLACK_TOKEN, signing secret"
        " from KEELGATE_SLACK_SECRET."
    ),
    "audit.retired": (
        f"Events 1–49 retired, older than 183 days: archived to acme-{HOSTILE}.json, sha256 cdcdcdcdcdcd…"
        " (checkpoint of size 60) and removed from the live log."
    ),
}
"""What the page says of a few of them, word for word."""


def append_every_kind(tenant_id: str, *, empty_too: bool = False) -> list[str]:
    """Append one event of each kind to ``tenant_id``'s chain (and, with ``empty_too``,
    one more of each with an empty body, as a writer of another version might); the kinds."""
    from audit.wiring import audit_log

    assert set(BODIES) == set(EVENT_KINDS), "every listed kind needs a body here"
    log = audit_log()
    for kind, body in BODIES.items():
        log.append(tenant_id, actor="tester", kind=kind, body=body)
    if empty_too:
        for kind in BODIES:
            log.append(tenant_id, actor="tester", kind=kind, body={})
    return list(BODIES)
