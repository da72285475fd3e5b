"""Every kind of audit event the product writes: one list, with who writes it and what it means.

The chain is written in many places (the engine's loop, gateway and decisions, the
LangGraph node, the site's run services, webhooks, the login throttle), and read in as
many (the audit page, the API, webhooks, email, metrics, spans). A reader must not
guess what exists: this list is the one answer. ``tests/site/audit/test_kinds.py``
reads the product's source and fails when a kind is written that the list lacks, or
listed that nothing writes; the audit page shows each kind in words
(:mod:`audit.presentation`), and the docs' reference lists them from here.

The engine cannot import this app, so its kinds are named here rather than there; the
test keeps the two honest.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EVENT_KINDS", "EventKind"]


@dataclass(frozen=True)
class EventKind:
    """One kind of event: its name, where it is written, and what it records."""

    name: str
    written_by: tuple[str, ...]
    """The modules (or packages) that append it, dotted."""
    meaning: str
    """One sentence: what happened when this event was written."""


_KINDS = (
    # A run's life.
    EventKind(
        "run.requested",
        ("runs.services",),
        "A person or an API client asked an agent for a run (its agent and goal); the run is queued.",
    ),
    EventKind(
        "run.started",
        ("keelgate.loop", "runs.engine.graphs"),
        "The run saved its first checkpoint (the loop's, or a graph agent's).",
    ),
    EventKind(
        "run.status",
        ("runs.services",),
        "The run's status changed (queued, running, waiting, stopped, done, cancelled), with the worker"
        " or person that moved it.",
    ),
    EventKind(
        "run.resumed",
        ("runs.services",),
        "A person resumed a stopped run, perhaps with new limits; it is queued again.",
    ),
    EventKind(
        "run.cancel_requested",
        ("approvals.services",),
        "Someone asked a running run to stop; the worker stops it at its next step.",
    ),
    EventKind(
        "run.cancelled",
        ("keelgate.loop", "approvals.services"),
        "The run was cancelled; approvals it was waiting for were withdrawn.",
    ),
    EventKind(
        "run.stopped",
        ("keelgate.loop",),
        "The loop stopped, and why: its goal reached, a limit hit, an approval or an unknown outcome"
        " to wait for, or an error.",
    ),
    # The loop's steps.
    EventKind(
        "loop.planned",
        ("keelgate.loop",),
        "The planner chose the next calls (or an answer), saved before any of them runs (write-ahead).",
    ),
    EventKind(
        "loop.reconciled",
        ("keelgate.loop", "keelgate.contrib.langgraph"),
        "A call whose outcome was unknown was settled as executed or not executed, by a person or an"
        " outcome confirmer.",
    ),
    EventKind(
        "graph.interrupted",
        ("keelgate.contrib.langgraph",),
        "A LangGraph agent paused at a gated call until a person answers (an approval or an unknown"
        " outcome).",
    ),
    EventKind(
        "gateway.call",
        ("keelgate.gateway",),
        "The gateway finished a tool call: done, denied, failed or unknown.",
    ),
    # Approvals.
    EventKind(
        "approval.requested",
        ("keelgate.gateway",),
        "A call waits for people to approve it (and says how many).",
    ),
    EventKind(
        "approval.decided",
        ("keelgate.loop",),
        "Someone approved a waiting call (or cast one vote of several) or denied it, with their note.",
    ),
    EventKind(
        "approval.edited",
        ("keelgate.loop",),
        "Someone changed a waiting call's arguments before approving: the proposal is denied, and the"
        " edited call, a new action with its own key, replaces it.",
    ),
    EventKind(
        "approval.expiring",
        ("keelgate.loop",),
        "A waiting call's deadline is near: the people who can decide were warned.",
    ),
    EventKind(
        "approval.escalated",
        ("keelgate.loop",),
        "A deadline passed and the call went to a higher role with a new deadline.",
    ),
    EventKind(
        "approval.expired",
        ("keelgate.gateway", "keelgate.loop"),
        "A deadline passed without a decision: the call was denied (fail closed).",
    ),
    # The tenant's settings and its front door.
    EventKind(
        "webhook.registered",
        ("notifications.webhooks.services",),
        "An admin registered a webhook endpoint (its host and events; never its secret).",
    ),
    EventKind(
        "auth.locked_out",
        ("audit.lockouts",),
        "Too many wrong passwords locked a member's login out (the username and address).",
    ),
)

EVENT_KINDS: dict[str, EventKind] = {kind.name: kind for kind in _KINDS}
"""Every kind the product writes, by name, in the order a run meets them."""
