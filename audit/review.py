"""The audit review pages' reading and rows: the filters a link carries, and what a page shows.

The query string is read with the API's own schema (:class:`audit.schemas.AuditFiltersIn`),
so a filter means the same in ``/audit/<tenant>/?actor=alice`` and in ``GET
/api/v1/audit/events?actor=alice``; a value it refuses is shown beside its field, never
dropped (a page that quietly ignored ``from=yesterday`` would show the wrong events).

Rows are built from :mod:`audit.presentation` (the words per kind) and read any body with
``.get`` and ``str``: a kind this list does not know, or a field a writer left out, still
shows. The strings are plain; the templates escape them (bodies quote notes and tools).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from pydantic import ValidationError

from audit.checkpoints import cosigned_note
from audit.models import LEGACY_CHAIN, Checkpoint
from audit.models import AuditEvent as EventRow
from audit.presentation import AuditRow, audit_rows
from audit.schemas import AuditFiltersIn
from audit.store import event_from_row
from sitekit.api import MAX_ID, validation_words

__all__ = [
    "CheckpointEntry",
    "DecisionEntry",
    "EventEntry",
    "ReviewQuery",
    "checkpoint_entries",
    "decision_entries",
    "event_entries",
]

FIELDS = ("q", "kind", "actor", "run", "tool", "from", "to", "decisions")
"""The filters' query parameters, as the API names them."""
POSITION = ("before", "after")
"""Where a page of events starts: below ``before`` (newest first) or above ``after``."""
MAX_NOTE = 300
"""Characters of a note shown in the Decisions view; the event's page shows all of it."""


@dataclass(frozen=True)
class ReviewQuery:
    """A review page's query string: what was typed, the checked filters, and the position."""

    typed: dict[str, str]
    """Each filter's text as typed (for the form), by query parameter name."""
    filters: AuditFiltersIn | None
    """The checked filters; None when something is wrong (:attr:`errors`)."""
    errors: dict[str, str] = field(default_factory=dict)
    """What is wrong, by query parameter name."""
    before: int | None = None
    after: int | None = None

    @classmethod
    def read(cls, data: Mapping[str, str]) -> ReviewQuery:
        """Read ``data`` (``request.GET``); parameters that are no filter are ignored."""
        typed = {name: data[name] for name in FIELDS if data.get(name)}
        errors: dict[str, str] = {}
        position: dict[str, int] = {}
        for name in POSITION:
            text = (data.get(name) or "").strip()
            if not text:
                continue
            if not text.isdigit() or not 0 <= int(text) <= MAX_ID:
                errors[name] = "Not an event number."
            else:
                position[name] = int(text)
        if len(position) > 1:
            errors["after"] = "A page starts before an event or after one, not both."
        try:
            filters: AuditFiltersIn | None = AuditFiltersIn.model_validate(typed)
        except ValidationError as exc:
            filters = None
            for error in exc.errors():
                name = str(error["loc"][0]) if error["loc"] else "q"
                errors.setdefault(name, _wording(error))
        if errors:
            filters = None
        return cls(typed, filters, errors, position.get("before"), position.get("after"))

    @property
    def at_newest(self) -> bool:
        """No position: the page shows the newest events (and takes new ones live)."""
        return self.before is None and self.after is None

    def query(self, **position: int | None) -> str:
        """The filters as typed, and a position (``before=`` or ``after=``), as a query string."""
        found = {**self.typed, **{k: str(v) for k, v in position.items() if v is not None}}
        return urlencode(found)

    @property
    def filtered(self) -> bool:
        """Any filter set (the page says "match these filters")."""
        return bool(self.typed)


PATTERN_WORDS = {
    "kind": "Not an event kind (lowercase words and dots, such as loop.reconciled).",
    "run": "Not a run id (letters, digits and . _ : -, up to 128).",
}
"""A refused pattern in words, for the fields whose pattern is a shape; the rest are said as
everywhere (:func:`sitekit.api.validation_words`)."""


def _wording(error: Mapping[str, Any]) -> str:
    """Pydantic's message as a sentence, without its "Value error, " prefix."""
    name = str(error["loc"][0]) if error.get("loc") else ""
    if error.get("type") == "string_pattern_mismatch" and name in PATTERN_WORDS:
        return PATTERN_WORDS[name]
    message = validation_words(error)
    message = message[:1].upper() + message[1:]
    return message if message.endswith(".") else message + "."


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventEntry:
    """One event as the review pages show it: its row of words, where it lives, its hash."""

    row: AuditRow
    url: str
    """The event's own page."""
    tool: str
    digest: str
    """The tree leaf's hash (hex), or for a hash-chained event its chain hash."""
    chained: bool
    """Written before the tree (``version`` 1): it also links into the hash chain."""
    leaf_hash: str
    prev_hash: str
    chain_hash: str


def event_entries(tenant_id: str, rows: list[EventRow]) -> list[EventEntry]:
    """The entries of ``rows``, in their order."""
    shown = audit_rows(tenant_id, [event_from_row(row) for row in rows])
    return [
        EventEntry(
            row=words,
            url=reverse("audit-event", args=[tenant_id, row.seq]),
            tool=row.tool or _text(_body(row.body).get("tool")),
            digest=row.leaf_hash or row.hash,
            chained=row.version == LEGACY_CHAIN,
            leaf_hash=row.leaf_hash,
            prev_hash=row.prev_hash,
            chain_hash=row.hash,
        )
        for row, words in zip(rows, shown, strict=True)
    ]


# -- decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionEntry:
    """One decision: who, when, what (the tool, the run), the outcome and the note."""

    seq: int
    at: datetime
    actor: str
    kind: str
    outcome: str
    """The decision in a few words ("denied", "reconciled: not executed")."""
    tool: str
    run_id: str
    run_url: str
    note: str
    url: str


def decision_entries(tenant_id: str, rows: list[EventRow]) -> list[DecisionEntry]:
    """The Decisions view's entries of ``rows`` (any kind shows; the view lists decisions)."""
    entries = []
    for entry, row in zip(event_entries(tenant_id, rows), rows, strict=True):
        body = _body(row.body)
        note = _text(body.get("note"))
        entries.append(
            DecisionEntry(
                seq=entry.row.seq,
                at=entry.row.at,
                actor=entry.row.actor,
                kind=entry.row.kind,
                outcome=_outcome(entry.row.kind, body),
                tool=entry.tool,
                run_id=entry.row.run_id,
                run_url=entry.row.run_url,
                note=note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 1] + "…",
                url=entry.url,
            )
        )
    return entries


def _outcome(kind: str, body: Mapping[str, Any]) -> str:
    """A decision's outcome in a few words, from its body (any body: missing fields are left out)."""
    if kind == "approval.decided":
        if body.get("decision") == "deny":
            return "denied"
        votes = body.get("approvals"), body.get("required")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in votes) and votes[1] != 1:
            return f"approved ({votes[0]} of {votes[1]})"
        return "approved"
    if kind == "approval.edited":
        changed = body.get("changed")
        if isinstance(changed, list) and changed:
            return "edited: " + ", ".join(_text(c) for c in changed)
        return "edited"
    if kind == "loop.reconciled":
        verdict = _text(body.get("verdict")).replace("_", " ")
        return f"reconciled: {verdict}" if verdict else "reconciled"
    if kind == "approval.escalated":
        role = _text(body.get("escalated_to"))
        return f"escalated to {role}s" if role else "escalated"
    if kind == "approval.expired":
        return "expired: denied"
    if kind == "run.cancel_requested":
        return "cancel requested"
    if kind == "run.cancelled":
        withdrawn = body.get("withdrawn")
        n = len(withdrawn) if isinstance(withdrawn, list) else 0
        return f"cancelled, {n} approval{'s' if n != 1 else ''} withdrawn" if n else "cancelled"
    return kind


# -- checkpoints -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointEntry:
    """One signed checkpoint: the tree's size and root, when, and who signed its note."""

    size: int
    root: str
    signed_at: datetime
    origin: str
    """The note's first line: which log it is a checkpoint of."""
    signers: list[str]
    """The key names of the note's signature lines."""
    note: str


def checkpoint_entries(checkpoints: list[Checkpoint]) -> list[CheckpointEntry]:
    """The entries of ``checkpoints``, in their order."""
    return [
        CheckpointEntry(
            size=c.size,
            root=c.root,
            signed_at=c.signed_at,
            origin=c.note.split("\n", 1)[0],
            signers=_signers(cosigned_note(c)),
            note=cosigned_note(c),
        )
        for c in checkpoints
    ]


def _signers(note: str) -> list[str]:
    """The key names of a C2SP signed note's signature lines (``— <name> <signature>``)."""
    names = []
    for line in note.split("\n"):
        if line.startswith("\u2014 "):
            parts = line.split(" ")
            if len(parts) >= 3 and parts[1]:
                names.append(parts[1])
    return names


# -- bodies ----------------------------------------------------------------------------------


def _body(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return {}
    return body if isinstance(body, dict) else {}


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
