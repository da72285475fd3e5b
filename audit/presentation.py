"""The audit page's rows: each event of any kind, with any body, as plain strings.

An event's body is whatever its writer put there (``auth.locked_out`` and
``webhook.registered`` name no run; a row written by an older version may lack a field
this one writes), so the template reads only :class:`AuditRow`, built here with
``.get`` and ``str``: no template lookup of a body field can fail, and a kind this list
does not know still shows, with its body. The strings are plain; the template escapes
them like any other value (bodies quote tool names, notes and usernames).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.urls import NoReverseMatch, reverse

from audit.kinds import EVENT_KINDS
from keelgate.audit import AuditEvent

__all__ = ["WORDS", "AuditRow", "audit_rows", "event_words"]

MAX_TEXT = 120
"""Characters of one body value shown in a row's words; the whole body is a click away."""


@dataclass(frozen=True)
class AuditRow:
    """One event as the page shows it."""

    seq: int
    at: datetime
    actor: str
    kind: str
    meaning: str
    """What the kind records ("" for a kind the product does not list)."""
    words: str
    """The event in words, from its body."""
    run_id: str
    run_url: str
    """The run's page, or "" when the body names no run."""
    body: str
    """The body as indented JSON."""
    hash: str


def audit_rows(tenant_id: str, events: Iterable[AuditEvent]) -> list[AuditRow]:
    """The page's rows for ``events``, in their order."""
    rows = []
    for event in events:
        body = event.body if isinstance(event.body, Mapping) else {"value": event.body}
        run_id = body.get("run_id")
        run_id = run_id if isinstance(run_id, str) else ""
        known = EVENT_KINDS.get(event.kind)
        rows.append(
            AuditRow(
                seq=event.seq,
                at=event.at,
                actor=str(event.actor),
                kind=str(event.kind),
                meaning=known.meaning if known else "",
                words=event_words(event.kind, body),
                run_id=run_id,
                run_url=_run_url(tenant_id, run_id),
                body=json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False, default=str),
                hash=str(event.hash),
            )
        )
    return rows


def event_words(kind: str, body: Mapping[str, Any]) -> str:
    """What the event says, in a sentence; for a kind without words, "" (the body still shows)."""
    words = WORDS.get(kind)
    if words is None:
        return ""
    try:
        return words(_Body(body))
    except Exception:  # a body no writer of this version makes: show it, never fail the page
        return ""


def _run_url(tenant_id: str, run_id: str) -> str:
    if not run_id or len(run_id) > 128:
        return ""
    try:
        return reverse("run", args=[tenant_id, run_id])
    except NoReverseMatch:
        return ""


class _Body:
    """A body's fields as short text: a missing field reads as ``default``."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    def has(self, key: str) -> bool:
        return self.body.get(key) not in (None, "", [], {})

    def text(self, key: str, default: str = "?") -> str:
        value = self.body.get(key)
        if value is None or value == "":
            return default
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        elif not isinstance(value, str):
            value = json.dumps(value, sort_keys=True, default=str)
        return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"

    def when(self, key: str) -> str:
        value = self.text(key)
        try:
            return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            return value

    def note(self) -> str:
        return f' Note: "{self.text("note")}".' if self.has("note") else ""

    def count(self, key: str) -> int:
        value = self.body.get(key)
        return len(value) if isinstance(value, list) else 0

    def call(self, *, hashed: bool = False) -> str:
        """The call an event is about, in words: the tool's ``impact`` line, else its
        ``arguments``, else (with ``hashed``) the start of its ``arguments_hash``; or ""."""
        if self.has("impact"):
            return self.text("impact")
        arguments = self.body.get("arguments")
        if isinstance(arguments, Mapping) and arguments:
            return _short(", ".join(f"{k}={_value(v)}" for k, v in sorted(arguments.items(), key=str)))
        if hashed and self.has("arguments_hash"):
            return f"arguments {self.text('arguments_hash')[:12]}…"
        return ""

    def how(self) -> str:
        """How a decision came (" via API key 12 from 10.0.0.4"), or "" when the body does not say."""
        via = self.body.get("via")
        if via == "api":
            said = f" via API key {self.text('key_id')}" if self.has("key_id") else " via the API"
        elif via == "console":
            said = " in the console"
        elif via == "email":
            said = f" via email link {self.text('link_id')}" if self.has("link_id") else " via an email link"
        elif self.has("via"):
            said = f" via {self.text('via')}"
        else:
            said = ""
        return said + (f" from {self.text('address')}" if self.has("address") else "")


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _short(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _colon(what: str) -> str:
    return f": {what}" if what else ""


def _paren(what: str) -> str:
    return f" ({what})" if what else ""


def _started(b: _Body) -> str:
    how = "a graph" if b.body.get("graph") is True else f"a {b.text('loop_type', 'loop')} loop"
    opted = (
        f"; side effects opted in: {b.text('side_effects_opt_in')}" if b.has("side_effects_opt_in") else ""
    )
    return f"Run started as {how}{opted}."


def _status(b: _Body) -> str:
    reason = f" ({b.text('reason')})" if b.has("reason") else ""
    outcome = f"; outcome {b.text('outcome')}" if b.has("outcome") else ""
    return f"Run is now {b.text('status')}{reason}{outcome}."


def _resumed(b: _Body) -> str:
    limits = b.body.get("limits")
    if isinstance(limits, Mapping) and limits:
        return (
            "Run queued again with limits " + ", ".join(f"{k}={v}" for k, v in sorted(limits.items())) + "."
        )
    return "Run queued again."


def _cancelled(b: _Body) -> str:
    n = b.count("withdrawn")
    withdrawn = f", {n} waiting approval{'s' if n != 1 else ''} withdrawn" if n else ""
    return f"Run cancelled{withdrawn}{b.how()}.{b.note()}"


def _stopped(b: _Body) -> str:
    error = f", error {b.text('error')}" if b.has("error") else ""
    return f"Run stopped: {b.text('reason')}{error}."


def _planned(b: _Body) -> str:
    actions = b.body.get("actions")
    tools = (
        [str(a.get("tool", "?")) for a in actions if isinstance(a, Mapping)]
        if isinstance(actions, list)
        else []
    )
    what = "calls " + ", ".join(tools) if tools else "an answer, no calls"
    return f"Iteration {b.text('iteration')}: planned {what}."[: MAX_TEXT * 2]


def _reconciled(b: _Body) -> str:
    verdict = b.text("verdict").replace("_", " ")
    what = _paren(b.call(hashed=True))
    return (
        f"Outcome of {b.text('tool')}{what} settled: {verdict} (from {b.text('source')}){b.how()}.{b.note()}"
    )


def _call(b: _Body) -> str:
    code = f" ({b.text('code')})" if b.has("code") else ""
    replayed = ", replayed" if b.body.get("replayed") is True else ""
    return f"{b.text('tool')}{_paren(b.call())}: {b.text('status')}{code}{replayed}."


def _requested(b: _Body) -> str:
    high = " High impact." if b.body.get("high_impact") is True else ""
    return f"{b.text('tool')} waits for {b.text('required', '1')} approval(s){_colon(b.call())}.{high}"


def _decided(b: _Body) -> str:
    what = _colon(b.call(hashed=True))
    if b.body.get("decision") == "deny":
        return f"{b.text('tool')} denied{what}{b.how()}.{b.note()}"
    votes = f" ({b.text('approvals')} of {b.text('required')})" if b.has("approvals") else ""
    confirmed = ", high impact confirmed" if b.body.get("high_impact_confirmed") is True else ""
    return f"{b.text('tool')} approved{votes}{what}{confirmed}{b.how()}.{b.note()}"


def _edited(b: _Body) -> str:
    changes = b.body.get("changes")
    if isinstance(changes, Mapping) and changes:
        steps = [
            f"{k} {_value(c.get('old'))} → {_value(c.get('new'))}"
            for k, c in sorted(changes.items(), key=str)
            if isinstance(c, Mapping)
        ]
        changed = f": {_short(', '.join(steps))}"
    else:
        changed = f": changed {b.text('changed')}" if b.has("changed") else ""
    confirmed = ", high impact confirmed" if b.body.get("high_impact_confirmed") is True else ""
    return f"{b.text('tool')} edited before approval{changed}{confirmed}{b.how()}.{b.note()}"


def _expired(b: _Body) -> str:
    return f"Deadline passed: {b.text('tool', 'the call')}{_paren(b.call())} denied (fail closed)."


LINK_REFUSALS = {
    "not_yours": "opened by someone other than its recipient",
    "used": "used again",
    "not_allowed": "whose recipient's role no longer decides the call",
}


def _link_refused(b: _Body) -> str:
    why = LINK_REFUSALS.get(str(b.body.get("reason")), f"refused ({b.text('reason')})")
    sent = f" (sent to {b.text('recipient')})" if b.has("recipient") else ""
    where = f" from {b.text('address')}" if b.has("address") else ""
    return (
        f"Email link {b.text('link_id')}{sent} to decide {b.text('tool', 'a call')} {why}{where}:"
        " nothing was decided."
    )


def _expiring(b: _Body) -> str:
    then = f"then to {b.text('escalates_to')}s" if b.has("escalates_to") else "then denied"
    return f"Warned: {b.text('tool', 'the call')} expires at {b.when('expires_at')}, {then}."


def _escalated(b: _Body) -> str:
    return (
        f"Deadline passed: {b.text('tool', 'the call')} escalated to {b.text('escalated_to')}s, "
        f"who have until {b.when('expires_at')}."
    )


def _registered(b: _Body) -> str:
    events = b.text("events", "") or "every event"
    return f"Webhook to {b.text('host')} registered for {events}."


def _webhook(done: str) -> Callable[[_Body], str]:
    """``Webhook #<id> to <host> <done>.``: an admin's change to an endpoint."""
    return lambda b: f"Webhook #{b.text('endpoint_id')} to {b.text('host')} {done}."


def _rotated(b: _Body) -> str:
    until = b.text("previous_valid_until", "")
    grace = f"; the old one also signs until {until}" if until else "; the old one stopped at once"
    return f"Signing secret of webhook #{b.text('endpoint_id')} to {b.text('host')} rotated{grace}."


def _updated(b: _Body) -> str:
    events = b.text("events", "") or "every event"
    which = f"#{b.text('endpoint_id')} to {b.text('host')}"
    return f"Webhook {which} changed ({b.text('changed')}): now for {events}."


def _redelivered(b: _Body) -> str:
    return f"Webhook message {b.text('message_id')} ({b.text('event_type')}) to {b.text('host')} sent again."


def _member_added(b: _Body) -> str:
    how = " (account created)" if b.body.get("created_user") is True else ""
    again = " again" if b.body.get("reactivated") is True else ""
    return f"{b.text('username')} added{again} as {b.text('role')}{how}."


def _key(b: _Body) -> str:
    name = f" “{b.text('name')}”" if b.text("name", "") else ""
    return f"API key kg_{b.text('prefix')}_…{name}, acting as {b.text('username')}"


def _upstream(b: _Body) -> str:
    verb = "registered" if b.body.get("created") is True else "changed"
    how = f"{b.text('transport')} to {b.text('target')}" if b.has("target") else b.text("transport")
    return f"MCP upstream {b.text('upstream')} {verb} ({how}) via the {b.text('via', 'command')}."


def _slack_refused(b: _Body) -> str:
    who = f"Slack user {b.text('slack_user')}"
    what = (
        f"{b.text('tool')} in run {b.text('run_id')}"
        if b.has("tool")
        else f"approval {b.text('approval_id')}"
    )
    return f"Click in Slack by {who} on {what} refused: {b.text('reason')}."


def _slack_workspace(b: _Body) -> str:
    verb = "registered" if b.body.get("created") is True else "changed"
    return (
        f"Slack workspace {b.text('team_id')} {verb}: posts to {b.text('channel')}; token from"
        f" {b.text('token_env')}, signing secret from {b.text('secret_env')}."
    )


def _retired(b: _Body) -> str:
    age = f", older than {b.text('older_than_days')} days" if b.has("older_than_days") else ""
    digest = f", sha256 {b.text('archive_sha256')[:12]}…" if b.has("archive_sha256") else ""
    return (
        f"Events {b.text('from_seq')}–{b.text('to_seq')} retired{age}: archived to"
        f" {b.text('archive_name', 'a bundle')}{digest} (checkpoint of size {b.text('checkpoint_size')})"
        " and removed from the live log."
    )


def _rule(b: _Body) -> str:
    return f"standing rule #{b.text('rule_id')} ({b.text('tool')} of {b.text('agent')})"


def _standing_created(b: _Body) -> str:
    what = "exactly one call's arguments" if b.has("exact_arguments_hash") else f"bounds {b.text('bounds')}"
    return f"Made {_rule(b)} for {what}, until {b.when('expires_at')}.{b.note()}"


WORDS: dict[str, Callable[[_Body], str]] = {
    "run.requested": lambda b: f"Run of agent {b.text('agent')} requested.",
    "run.started": _started,
    "run.status": _status,
    "run.resumed": _resumed,
    "run.cancel_requested": lambda b: f"Cancel requested{b.how()}; the run stops at its next step.{b.note()}",
    "run.cancelled": _cancelled,
    "run.stopped": _stopped,
    "loop.planned": _planned,
    "loop.reconciled": _reconciled,
    "graph.interrupted": lambda b: f"Graph paused at {b.text('tool')} for a person's {b.text('why')}.",
    "gateway.call": _call,
    "approval.requested": _requested,
    "approval.decided": _decided,
    "approval.edited": _edited,
    "approval.expiring": _expiring,
    "approval.escalated": _escalated,
    "approval.expired": _expired,
    "approval.link_refused": _link_refused,
    "approval.standing_created": _standing_created,
    "approval.standing_endorsed": lambda b: (
        f"Endorsed {_rule(b)}: made by {b.text('makers')} ({b.text('required')} needed)."
    ),
    "approval.standing_edited": lambda b: f"Narrowed {_rule(b)}.",
    "approval.standing_used": lambda b: (
        f"{_rule(b).capitalize()}, made by {b.text('made_by')}, approved the call in run {b.text('run_id')}."
    ),
    "approval.standing_revoked": lambda b: f"Revoked {_rule(b)} after {b.text('uses')} uses.{b.note()}",
    "webhook.registered": _registered,
    "webhook.updated": _updated,
    "webhook.secret_rotated": _rotated,
    "webhook.disabled": _webhook("disabled"),
    "webhook.enabled": _webhook("enabled"),
    "webhook.deleted": lambda b: (
        f"Webhook #{b.text('endpoint_id')} to {b.text('host')} deleted,"
        f" with {b.text('deliveries')} deliveries."
    ),
    "webhook.test_sent": lambda b: (
        f"Test message sent to webhook #{b.text('endpoint_id')} at {b.text('host')}."
    ),
    "webhook.redelivered": _redelivered,
    "member.added": _member_added,
    "member.invited": lambda b: (
        f"{b.text('email')} invited as {b.text('role')}; the link works once, until {b.when('expires_at')}."
    ),
    "member.joined": lambda b: (
        f"{b.text('username')} joined as {b.text('role')} (invited by {b.text('invited_by')})."
    ),
    "member.role_changed": lambda b: (
        f"{b.text('username')}'s role changed from {b.text('old_role')} to {b.text('role')}."
    ),
    "member.deactivated": lambda b: f"{b.text('username')} ({b.text('role')}) deactivated.",
    "api_key.created": lambda b: f"{_key(b)}, created.",
    "api_key.revoked": lambda b: f"{_key(b)}, revoked.",
    "auth.signed_in": lambda b: f"{b.text('username')} signed in from {b.text('address')}.",
    "mcp.upstream_registered": _upstream,
    "slack.workspace_registered": _slack_workspace,
    "slack.linked": lambda b: (
        f"Slack user {b.text('slack_user')} of {b.text('team_id')} linked to {b.text('username')}"
        f" ({'by an admin' if b.body.get('how') == 'admin' else 'with their code'})."
    ),
    "slack.unlinked": lambda b: (
        f"Slack user {b.text('slack_user')} of {b.text('team_id')} no longer acts as {b.text('username')}."
    ),
    "slack.refused": _slack_refused,
    "auth.locked_out": lambda b: f"Login of {b.text('username')} locked out from {b.text('ip_address')}.",
    "audit.retired": _retired,
}
"""A sentence for each kind in :data:`audit.kinds.EVENT_KINDS`, from its body."""
