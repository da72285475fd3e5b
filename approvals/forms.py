"""The inbox's decision forms as posted: what the service takes, what was typed, what is wrong.

Each form is read once, in the view, before any service is called. What the person
typed is kept under the names the card's template shows it again by, so a refused
decision (a form problem here, or an error of the service) never throws their words
away. The rules of a decision (a deny needs a reason, an edit must fit the tool) are
the services' and the engine's; a form only turns text into the values they take.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from django.utils import timezone

from approvals.edit_form import PREFIX, EditField, parse_edit

__all__ = [
    "NOTE_MAX",
    "RESULT_MAX",
    "DecisionForm",
    "ReconcileForm",
    "StandingEdit",
    "StandingForm",
    "note_problem",
]

NOTE_MAX = 2000
"""The API's limit on a note (``approvals.schemas``), said in the console's words."""

RESULT_MAX = 16_384


def note_problem(note: str) -> str:
    """What is wrong with a note, or ""."""
    return f"The note is longer than {NOTE_MAX} characters." if len(note) > NOTE_MAX else ""


@dataclass(frozen=True)
class DecisionForm:
    """An approve, edit-then-approve or deny form of one approval card."""

    note: str
    seen: str | None
    """The arguments hash the card showed: the service refuses if the call has changed."""
    confirmed: bool
    """"approve" typed in the confirmation box (a high-impact call needs it)."""
    arguments: dict[str, Any] | None
    """The edited arguments, or None for a plain decision."""
    typed: dict[str, str]
    """What the card shows again: the edit's fields (``arg.<name>``), ``edit`` if the edit
    form was posted, and the note under the name of the box it was typed in."""
    problem: str = ""

    @classmethod
    def read(
        cls, data: Mapping[str, str], *, decision: Literal["approve", "deny"], fields: Sequence[EditField]
    ) -> DecisionForm:
        """The form as posted; ``fields`` are the card's edit fields (none: no edit form)."""
        note = data.get("note", "")
        edit = decision == "approve" and data.get("edit") == "1"
        typed = {k: v for k, v in data.items() if k.startswith(PREFIX)}
        if edit:
            typed["edit"] = "1"
        if note.strip():
            typed["note_edit" if edit else f"note_{decision}"] = note
        form = cls(
            note=note,
            seen=data.get("arguments_hash") or None,
            confirmed=data.get("confirm", "").strip().lower() == "approve",
            arguments=None,
            typed=typed,
            problem=note_problem(note),
        )
        if form.problem or not edit:
            return form
        arguments, problems = parse_edit(list(fields), data)
        if problems or not fields:
            text = "The edit cannot be read: " + ("; ".join(problems) or "no form for this tool") + "."
            return cls(form.note, form.seen, form.confirmed, None, typed, text)
        return cls(form.note, form.seen, form.confirmed, arguments, typed)


@dataclass(frozen=True)
class ReconcileForm:
    """An unknown outcome's form: executed or not, a note, and what the downstream record holds."""

    executed: bool
    note: str
    result: dict[str, Any] | None
    typed: dict[str, str]
    problem: str = ""

    @classmethod
    def read(cls, data: Mapping[str, str]) -> ReconcileForm:
        """The form as posted, with the first thing wrong with it."""
        executed = data.get("executed", "")
        note = data.get("note", "")
        result_text = data.get("result", "").strip()
        typed = {"executed": executed, "note": note, "result": result_text}
        result, problem = _json_object(result_text)
        if executed not in ("yes", "no"):
            problem = "Say whether the call was executed."
        elif note_problem(note):
            problem = note_problem(note)
        elif not problem and result is not None and executed != "yes":
            problem = "A result is only recorded for a call that was executed."
        return cls(executed == "yes", note, result, typed, problem)


def _json_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """A reconcile form's result: a JSON object (or nothing), or the reason it is not one."""
    if not text:
        return None, ""
    if len(text) > RESULT_MAX:
        return None, f"The result is longer than {RESULT_MAX} characters."
    try:
        value = json.loads(text)
    except ValueError:
        return None, 'The result is not JSON: write an object such as {"order_id": "PB-000001"}.'
    if not isinstance(value, dict):
        return None, "The result must be a JSON object (in braces), not a list or a single value."
    return value, ""


def _number(text: str) -> float | int | None:
    """A typed number (an int when it is one), or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return int(value) if value.is_integer() else value


@dataclass(frozen=True)
class StandingForm:
    """The card's "and approve the same from now on": exact arguments, or bounds on fields
    (``standing_min_<field>``, ``standing_max_<field>``, ``standing_eq_<field>`` for "this
    very value"), and the days until it expires (``standing_days``)."""

    exact: bool
    bounds: dict[str, dict[str, Any]] = field(default_factory=dict)
    days: float = 0.0
    problem: str = ""

    @classmethod
    def read(cls, post: Mapping[str, Any], row: Any) -> StandingForm | None:
        """None unless the box was ticked."""
        if post.get("standing") != "1":
            return None
        exact = post.get("standing_match", "exact") != "bounds"
        days = _number(str(post.get("standing_days", "")).strip())
        if days is None or days <= 0:
            return cls(exact, problem="Say in how many days the standing rule expires (a number above 0).")
        if exact:
            return cls(True, days=float(days))
        try:
            arguments = json.loads(row.arguments)
        except ValueError:
            arguments = {}
        bounds: dict[str, dict[str, Any]] = {}
        for key, raw in post.items():
            text = str(raw).strip()
            for prefix, name in (("standing_min_", "min"), ("standing_max_", "max")):
                if key.startswith(prefix) and text:
                    value = _number(text)
                    if value is None:
                        return cls(False, problem=f"{key[len(prefix) :]}: the {name} must be a number.")
                    bounds.setdefault(key[len(prefix) :], {})[name] = value
            if key.startswith("standing_eq_") and text == "1":
                name = key[len("standing_eq_") :]
                if isinstance(arguments, dict) and name in arguments:
                    bounds.setdefault(name, {})["equals"] = arguments[name]
        return cls(False, bounds=bounds, days=float(days))

    def expires_at(self) -> datetime:
        return timezone.now() + timedelta(days=self.days)

    @staticmethod
    def read_edit(post: Mapping[str, Any], rule: Any) -> StandingEdit:
        """An admin's narrowing of ``rule``: ``days`` from now, ``min_<f>``/``max_<f>`` per bound."""
        expires_at = None
        days_text = str(post.get("days", "")).strip()
        if days_text:
            days = _number(days_text)
            if days is None or days <= 0:
                return StandingEdit(problem="Say in how many days the rule expires (a number above 0).")
            expires_at = timezone.now() + timedelta(days=days)
        bounds: dict[str, dict[str, Any]] | None = None
        if rule.bounds:
            bounds = {}
            for name, bound in rule.bounds.items():
                narrowed = {k: v for k, v in bound.items() if k == "equals"}
                for key in ("min", "max"):
                    text = str(post.get(f"{key}_{name}", "")).strip()
                    if text:
                        value = _number(text)
                        if value is None:
                            return StandingEdit(problem=f"{name}: the {key} must be a number.")
                        narrowed[key] = value
                    elif key in bound:
                        narrowed[key] = bound[key]
                bounds[name] = narrowed
        return StandingEdit(expires_at=expires_at, bounds=bounds)


@dataclass(frozen=True)
class StandingEdit:
    """What an admin's edit of a standing rule asks: an expiry and bounds (None: unchanged)."""

    expires_at: datetime | None = None
    bounds: dict[str, dict[str, Any]] | None = None
    problem: str = ""
