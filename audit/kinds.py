"""Every kind of audit event the product writes: one list, with who writes it and what it means.

The chain is written in many places (the engine's loop, gateway and decisions, the
LangGraph node, the site's run services, webhooks, the login throttle), and read in as
many (the audit page, the API, webhooks, email, metrics, spans). A reader must not
guess what exists: this list is the one answer, with every field a body of each kind
may hold. ``tests/site/audit/test_kinds.py`` reads the product's source and fails when a
kind is written that the list lacks, or listed that nothing writes, or when a body
written in the source names a field its kind does not list;
``tests/site/audit/test_kind_fields.py`` drives runs through the console, the API and
the worker and fails on any body field, however built, that its kind does not list. The
audit page shows each kind in words (:mod:`audit.presentation`), and the docs' reference
lists the kinds and their fields from here.

An event about a call names it by ``arguments_hash``; its ``arguments`` (and the tool's
``impact`` line, drawn from them) are written only for the tenants of
``KEELGATE_AUDIT_ARGUMENTS`` (:mod:`tenants.auditing` says why a setting). A person's
decision says how it came: ``via``, ``key_id`` or ``link_id``, ``address``.

The engine cannot import this app, so its kinds are named here rather than there; the
test keeps the two honest.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EVENT_KINDS", "EventKind"]


@dataclass(frozen=True)
class EventKind:
    """One kind of event: its name, where it is written, what it records, and its body's fields."""

    name: str
    written_by: tuple[str, ...]
    """The modules (or packages) that append it, dotted."""
    meaning: str
    """One sentence: what happened when this event was written."""
    fields: dict[str, str]
    """Every field its body may hold, with what it says (one line each). A field may be
    absent: written only when it applies, or by an older version."""


# The fields several kinds share.

_RUN = {"run_id": "The run."}
_CALL = {
    **_RUN,
    "action_id": "The planned call, by its id in the run.",
    "tool": "The tool it calls.",
}
_WEBHOOKS = ("notifications.webhooks.services",)
_ENDPOINT = {
    "endpoint_id": "The webhook endpoint's id.",
    "host": "The receiver's host name (never the URL's path or query).",
}
_STANDING = ("approvals.standing",)
_RULE = {
    "rule_id": "The standing rule's id.",
    "agent": "The agent whose calls it approves.",
    "tool": "The tool whose calls it approves.",
}
_KEY = {"idempotency_key": "The call's idempotency key (derived from its arguments)."}
_NAMED = {
    "arguments_hash": "The SHA-256 of the call's canonical JSON arguments: the exact call, as the API's"
    " `arguments_hash` names it.",
    "arguments": "The call's arguments; only for a tenant of `KEELGATE_AUDIT_ARGUMENTS`.",
    "impact": 'The tool\'s plain-words line for the call ("sell 150 ACME"), drawn from its arguments: with'
    " them only, when the tool has one.",
}
_HOW = {
    "via": "How the decision came: `console` (a signed-in session), `api` (an API key), `email` (the"
    " confirmation page of a link in an email), `slack` (a linked Slack user's button); absent when"
    " the caller did not say.",
    "key_id": "The API key's id, with `via` `api` (never its secret).",
    "link_id": "The email link's id, with `via` `email` (never its token).",
    "address": "The client's address as the site saw it (its peer, or the proxy's report with"
    " `--proxy-headers`).",
}
_NOTE = {"note": "The person's note (required for a denial and a reconcile)."}
_HIGH = {
    "high_impact": "The policy marked the call high impact.",
    "high_impact_confirmed": "The person gave the deliberate second confirmation a high-impact call needs.",
}

_KINDS = (
    # A run's life.
    EventKind(
        "run.requested",
        ("runs.services",),
        "A person or an API client asked an agent for a run; the run is queued.",
        {**_RUN, "agent": "The agent asked to run."},
    ),
    EventKind(
        "run.started",
        ("keelgate.loop", "runs.engine.graphs"),
        "The run saved its first checkpoint (the loop's, or a graph agent's).",
        {
            **_RUN,
            "loop_type": "`task`, `verification` or `monitor` (the loop's runs).",
            "side_effects_opt_in": "The side effects a monitor's caller opted in to beyond READ.",
            "graph": "True for a LangGraph agent's run.",
        },
    ),
    EventKind(
        "run.status",
        ("runs.services",),
        "The run's status changed (queued, running, waiting, stopped, done, cancelled), with the worker"
        " or person that moved it.",
        {
            **_RUN,
            "status": "The status it moved to.",
            "reason": "Why: `claimed`, `resumed`, `cancelled`, ...",
            "outcome": "What happened, when the run ended (done, cancelled, stopped): `completed`,"
            " `completed_with_edit`, `denied`, `abandoned_unknown_outcome`, `failed`, `budget_stop`,"
            " `cancelled` (`runs.outcomes`); absent for any other move.",
        },
    ),
    EventKind(
        "run.resumed",
        ("runs.services",),
        "A person resumed a stopped run, perhaps with new limits; it is queued again.",
        {**_RUN, "limits": "The new limits given, by name (empty: the same ones)."},
    ),
    EventKind(
        "run.cancel_requested",
        ("approvals.services",),
        "Someone asked a running run to stop; the worker stops it at its next step.",
        {**_RUN, **_NOTE, **_HOW},
    ),
    EventKind(
        "run.cancelled",
        ("keelgate.loop", "approvals.services"),
        "The run was cancelled; approvals it was waiting for were withdrawn.",
        {
            **_RUN,
            **_NOTE,
            "withdrawn": "The ids of the calls whose approvals were withdrawn.",
            "withdrawn_calls": "Each withdrawn call: `action_id`, `tool`, `arguments_hash` (and `arguments`,"
            " `impact` as above).",
            **_HOW,
        },
    ),
    EventKind(
        "run.stopped",
        ("keelgate.loop",),
        "The loop stopped, and why: its goal reached, a limit hit, an approval or an unknown outcome"
        " to wait for, or an error.",
        {
            **_RUN,
            "reason": "The stop reason (`goal_reached`, `approval_pending`, `outcome_unknown`, ...).",
            "seq": "The checkpoint that recorded the stop.",
            "error": "The error's code, if an error stopped it.",
        },
    ),
    # The loop's steps.
    EventKind(
        "loop.planned",
        ("keelgate.loop",),
        "The planner chose the next calls (or an answer), saved before any of them runs (write-ahead).",
        {
            **_RUN,
            "iteration": "The plan step's number.",
            "actions": "Each call planned: `action_id`, `tool`, `idempotency_key` (never arguments).",
            "final_answer": "True if the planner answered instead of calling tools.",
        },
    ),
    EventKind(
        "loop.reconciled",
        ("keelgate.loop", "keelgate.contrib.langgraph"),
        "A call whose outcome was unknown was settled as executed or not executed, by a person or an"
        " outcome confirmer.",
        {
            **_CALL,
            **_NAMED,
            "source": "Who settled it: `human`, `confirmer`, or `idempotency_store` (the call's own record).",
            "verdict": "`executed` or `not_executed`.",
            **_NOTE,
            "result_recorded": "A downstream record (such as an order id) was given as the call's output.",
            **_HOW,
        },
    ),
    EventKind(
        "graph.interrupted",
        ("keelgate.contrib.langgraph",),
        "A LangGraph agent paused at a gated call until a person answers (an approval or an unknown"
        " outcome).",
        {**_CALL, "why": "`approval` or `unknown_outcome`."},
    ),
    EventKind(
        "gateway.call",
        ("keelgate.gateway",),
        "The gateway finished a tool call: done, denied, failed or unknown.",
        {
            **_CALL,
            **_KEY,
            **_NAMED,
            "status": "The call's outcome: `done`, `denied`, `error`, `unknown`, `abandoned`.",
            "code": "The error code, if it did not succeed.",
            "replayed": "True if its key had completed before: the stored result, nothing run again.",
        },
    ),
    # Approvals.
    EventKind(
        "approval.requested",
        ("keelgate.gateway",),
        "A call waits for people to approve it (and says how many).",
        {
            **_CALL,
            **_KEY,
            **_NAMED,
            "required": "How many different people must approve it.",
            "high_impact": _HIGH["high_impact"],
        },
    ),
    EventKind(
        "approval.decided",
        ("keelgate.loop",),
        "Someone approved a waiting call (or cast one vote of several) or denied it, with their note.",
        {
            **_CALL,
            "decision": "`approve` or `deny`.",
            "approvals": "Approvals it has now (approve).",
            "required": "Approvals it needs (approve).",
            **_NOTE,
            **_NAMED,
            **_HIGH,
            **_HOW,
        },
    ),
    EventKind(
        "approval.edited",
        ("keelgate.loop",),
        "Someone changed a waiting call's arguments before approving: the proposal is denied, and the"
        " edited call, a new action with its own key, replaces it.",
        {
            **_CALL,
            "new_action_id": "The edited call, a new action (approved by the editor).",
            "original_hash": "The `arguments_hash` of the proposal.",
            "edited_hash": "The `arguments_hash` of the edited call.",
            "changed": "The names of the fields that changed.",
            "changes": "Each changed field's `old` and `new` value; with `arguments` only.",
            "arguments": "The proposal's arguments; only for a tenant of `KEELGATE_AUDIT_ARGUMENTS`.",
            "edited_arguments": "The edited call's arguments; with `arguments` only.",
            "impact": "The proposal's plain-words line; with `arguments` only.",
            "edited_impact": "The edited call's plain-words line; with `arguments` only.",
            **_NOTE,
            **_HIGH,
            **_HOW,
        },
    ),
    EventKind(
        "approval.expiring",
        ("keelgate.loop",),
        "A waiting call's deadline is near: the people who can decide were warned.",
        {
            **_CALL,
            "expires_at": "The deadline (ISO 8601).",
            "escalates_to": "The role the call goes to when it passes, if its policy escalates.",
        },
    ),
    EventKind(
        "approval.escalated",
        ("keelgate.loop",),
        "A deadline passed and the call went to a higher role with a new deadline.",
        {
            **_CALL,
            "escalated_to": "The role that decides it now.",
            "expires_at": "The new deadline (ISO 8601).",
            "previous_expires_at": "The deadline that passed.",
        },
    ),
    EventKind(
        "approval.expired",
        ("keelgate.gateway", "keelgate.loop"),
        "A deadline passed without a decision: the call was denied (fail closed).",
        {**_CALL, **_KEY, **_NAMED},
    ),
    EventKind(
        "approval.link_refused",
        ("notifications.emails.links",),
        "A link to decide a call, sent by email, was refused: opened or posted by someone other than its"
        " recipient, or its recipient posted a decision on it used already or with a role that no longer"
        " decides the call; nothing was decided.",
        {
            **_CALL,
            "link_id": "The link's id (never its token).",
            "reason": "`not_yours` (another person), `used` (a second use) or `not_allowed` (the recipient's"
            " role no longer decides the call, or they already approved it).",
            "recipient": "The username the link was sent to (the event's actor is who opened it).",
            "address": "The client's address as the site saw it.",
        },
    ),
    # Standing approval rules (approvals.standing).
    EventKind(
        "approval.standing_created",
        _STANDING,
        "A person made a standing approval rule: calls of this agent's tool within its constraints are"
        " approved by it until it expires (once it has all its makers).",
        {
            **_RULE,
            "bounds": "The bounds on named fields ({field: {min, max, equals}}).",
            "exact_arguments_hash": "When it allows exactly one call's arguments: their SHA-256.",
            "required": "How many distinct makers it needs before it is live (the M of M-of-N).",
            "expires_at": "When it stops approving (ISO 8601).",
            "note": "Why, in the maker's words (untrusted text).",
            "approval_id": "The inbox approval it was made from, if any.",
        },
    ),
    EventKind(
        "approval.standing_endorsed",
        _STANDING,
        "One more person made the standing rule theirs (a rule for M-of-N calls needs M makers).",
        {
            **_RULE,
            "makers": "Who made it so far, in order.",
            "required": "How many makers it needs.",
        },
    ),
    EventKind(
        "approval.standing_edited",
        _STANDING,
        "An admin narrowed a standing rule: an earlier expiry or tighter bounds.",
        {
            **_RULE,
            "expires_at": "Its new, earlier expiry (ISO 8601), when changed.",
            "bounds": "Its new bounds, when changed.",
        },
    ),
    EventKind(
        "approval.standing_used",
        _STANDING,
        "A standing rule approved a waiting call on behalf of the people who made it"
        " (the actor is its first maker).",
        {
            **_RULE,
            **_RUN,
            "action_id": "The planned call, by its id in the run.",
            "approval_id": "The inbox approval it settled.",
            "arguments_hash": _NAMED["arguments_hash"],
            "made_by": "The rule's makers, whose approvals it recorded.",
        },
    ),
    EventKind(
        "approval.standing_revoked",
        _STANDING,
        "An admin revoked a standing rule: it approves nothing from then on.",
        {
            **_RULE,
            "note": "Why, in the admin's words (untrusted text).",
            "uses": "How many calls it had approved.",
        },
    ),
    # The tenant's settings and its front door.
    EventKind(
        "webhook.registered",
        _WEBHOOKS,
        "An admin registered a webhook endpoint (its host and events; never its secret).",
        {
            **_ENDPOINT,
            "events": "The webhook events it wants (empty: all).",
            "include_arguments": "The tenant opted in to send it a call's arguments.",
            "from_seq": "The chain's head when it was registered: it hears of later events only.",
        },
    ),
    EventKind(
        "webhook.updated",
        _WEBHOOKS,
        "An admin changed a webhook endpoint: which settings, and its events and opt-in as they are now.",
        {
            **_ENDPOINT,
            "changed": "The settings changed: url, events, include_arguments, description (never their old"
            " or new URL).",
            "events": "The webhook events it wants now (empty: all).",
            "include_arguments": "Whether it is sent a call's arguments now.",
        },
    ),
    EventKind(
        "webhook.secret_rotated",
        _WEBHOOKS,
        "An admin rotated a webhook endpoint's signing secret (never either secret): the old one signs"
        " beside the new one until the grace period ends.",
        {
            **_ENDPOINT,
            "grace_seconds": "How long the old secret keeps signing (0: it stopped at once).",
            "previous_valid_until": "When the old secret stops signing (ISO 8601), or null with no grace.",
        },
    ),
    EventKind(
        "webhook.disabled",
        _WEBHOOKS,
        "An admin disabled a webhook endpoint: nothing is sent to it, its messages wait.",
        dict(_ENDPOINT),
    ),
    EventKind(
        "webhook.enabled",
        _WEBHOOKS,
        "An admin enabled a webhook endpoint again: its waiting messages go out.",
        dict(_ENDPOINT),
    ),
    EventKind(
        "webhook.deleted",
        _WEBHOOKS,
        "An admin deleted a webhook endpoint, with its deliveries.",
        {**_ENDPOINT, "deliveries": "How many of its deliveries were deleted with it."},
    ),
    EventKind(
        "webhook.test_sent",
        _WEBHOOKS,
        "An admin sent a webhook endpoint a test message: its id is this event's (msg_<tenant>_<seq>).",
        dict(_ENDPOINT),
    ),
    EventKind(
        "webhook.redelivered",
        _WEBHOOKS,
        "An admin sent a finished webhook message again, with its id and body unchanged.",
        {
            **_ENDPOINT,
            "message_id": "The message's webhook-id.",
            "event_type": "The message's webhook event type.",
            "attempts": "Attempts it had before this one.",
        },
    ),
    EventKind(
        "member.added",
        ("tenants.services",),
        "An admin (or a command) made a person a member of the tenant with a role.",
        {
            "username": "The member.",
            "role": "Their role in the tenant.",
            "created_user": "The person had no account: it was created.",
            "reactivated": "They had been a member before: their deactivated membership came back.",
        },
    ),
    EventKind(
        "member.invited",
        ("tenants.services",),
        "An admin emailed an invitation to join the tenant (a single-use link; never the link).",
        {
            "invitation_id": "The invitation.",
            "email": "The address invited.",
            "role": "The role the invitation gives.",
            "expires_at": "When the link stops working (ISO 8601).",
        },
    ),
    EventKind(
        "member.joined",
        ("tenants.services",),
        "A person used an invitation: their account was created and they joined (the actor).",
        {
            "invitation_id": "The invitation used.",
            "username": "The new member's username.",
            "role": "Their role.",
            "invited_by": "Who sent the invitation.",
        },
    ),
    EventKind(
        "member.role_changed",
        ("tenants.services",),
        "An admin (or a command) changed a member's role.",
        {"username": "The member.", "old_role": "The role before.", "role": "The role now."},
    ),
    EventKind(
        "member.deactivated",
        ("tenants.services",),
        "An admin (or a command) ended a membership: the person sees nothing of the tenant, and their"
        " keys of it stop working.",
        {"username": "The former member.", "role": "The role they held."},
    ),
    EventKind(
        "api_key.created",
        ("tenants.api_keys",),
        "An admin (or a command) created an API key acting as a member (never its secret).",
        {
            "key_id": "The key's id.",
            "prefix": "The key's public prefix (``kg_<prefix>_…``).",
            "name": "Its label.",
            "username": "The member it acts as.",
        },
    ),
    EventKind(
        "api_key.revoked",
        ("tenants.api_keys",),
        "An admin (or a command) revoked an API key: it answers 401 from now on.",
        {
            "key_id": "The key's id.",
            "prefix": "The key's public prefix.",
            "name": "Its label.",
            "username": "The member it acted as.",
        },
    ),
    EventKind(
        "auth.signed_in",
        ("tenants.services",),
        "A member signed in to the console (written in each tenant they belong to).",
        {"username": "The member's username.", "address": "The address they signed in from."},
    ),
    EventKind(
        "mcp.upstream_registered",
        ("mcp_gateway.services",),
        "An operator registered or changed an upstream MCP server of the tenant (through the command"
        " or the admin): its name, how it is reached, and its policy's digest.",
        {
            "upstream": "The upstream's name, the prefix of its tools (`<upstream>__<tool>`).",
            "created": "True when it was new, false when an existing one was changed.",
            "transport": "`stdio` (a command Keelgate launches) or `http` (a Streamable HTTP URL).",
            "target": "The URL's host, or the command's program name (never its arguments: they may"
            " hold a token).",
            "policy_sha256": "The SHA-256 of the policy as stored (canonical JSON).",
            "via": "`command` (manage.py keelgate_mcp_upstream) or `admin` (the Django admin).",
        },
    ),
    EventKind(
        "slack.workspace_registered",
        ("notifications.slack.workspaces",),
        "An operator registered or changed the tenant's Slack workspace: its team, channels, and the"
        " names of the environment variables holding its token and signing secret (never their values).",
        {
            "team_id": "Slack's id of the workspace.",
            "channel": "The default channel's id.",
            "agent_channels": "An agent's own channel, by agent.",
            "token_env": "The environment variable holding the bot token (its name only).",
            "secret_env": "The environment variable holding the signing secret (its name only).",
            "created": "True when it was new, false when an existing one was changed.",
            "from_seq": "The chain's head when it was registered: it hears of later items only.",
        },
    ),
    EventKind(
        "slack.linked",
        ("notifications.slack.links",),
        "A Slack user of the tenant's workspace was linked to a member: they act as that member when they"
        " click in Slack (the member with a one-time code, or an admin).",
        {
            "team_id": "The workspace.",
            "slack_user": "Slack's id of the user.",
            "username": "The member they act as.",
            "how": "`code` (the member's one-time code) or `admin` (an admin's command).",
        },
    ),
    EventKind(
        "slack.unlinked",
        ("notifications.slack.links",),
        "A Slack user's link to a member was removed: their clicks decide nothing.",
        {"team_id": "The workspace.", "slack_user": "Slack's id of the user.", "username": "The member."},
    ),
    EventKind(
        "slack.refused",
        ("notifications.slack.interactions",),
        "A click in Slack decided nothing: the clicker is not linked, or the decision service refused"
        " the member they are linked to (their role, four-eyes, a changed call, already settled).",
        {
            **_CALL,
            "team_id": "The workspace.",
            "slack_user": "Slack's id of the clicker.",
            "approval_id": "The approval the button named.",
            "arguments_hash": "The hash of the arguments the message showed.",
            "action": "What the button asked: `approve`.",
            "reason": "`unlinked`, or the decision service's error code (`forbidden`,"
            " `approval_duplicate_approver`, `approval_stale`, `approval_already_decided`, ...).",
        },
    ),
    EventKind(
        "auth.locked_out",
        ("audit.lockouts",),
        "Too many wrong passwords locked a member's login out (the username and address).",
        {"username": "The member's username.", "ip_address": "The address the attempts came from."},
    ),
    # The log itself.
    EventKind(
        "audit.retired",
        ("audit.retention",),
        "An operator retired the log's oldest events after their retention period: archived to a bundle"
        " that verified, then removed from the live log, whose tree keeps their hashes.",
        {
            "from_seq": "The first event retired.",
            "to_seq": "The last event retired: the live log serves events from the next one on.",
            "archive_name": "The archive's file name (not its directory).",
            "archive_sha256": "The SHA-256 of the archive file's bytes, hex: which file holds what was"
            " retired.",
            "checkpoint_size": "The size of the signed checkpoint the archive is proven under; the live log"
            " proves every later checkpoint consistent with it.",
            "older_than_days": "The retention period asked for, in days, when the cut was chosen by age.",
        },
    ),
)

EVENT_KINDS: dict[str, EventKind] = {kind.name: kind for kind in _KINDS}
"""Every kind the product writes, by name, in the order a run meets them."""
