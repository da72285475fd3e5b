"""The run pages' forms: start a run, and the limits a start or a resume takes.

Form text is turned into the JSON values the API's input schemas take (``"10"`` into
``10``), then checked by those very schemas (:class:`runs.schemas.RunStartIn`,
:class:`runs.schemas.StopIn`), so the console accepts exactly what ``POST /runs`` accepts.
What was typed is kept, to be shown again beside what is wrong with it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from keelgate.errors import KeelgateError, RunExistsError
from runs.schemas import RunStartIn, StopIn
from sitekit.api import validation_words
from sitekit.errors import GoalNotUnderstoodError, UnknownAgentError

__all__ = ["LIMIT_FIELDS", "StartForm", "parse_limits"]

LIMIT_FIELDS: dict[str, tuple[str, type]] = {
    "max_iterations": ("Iterations", int),
    "max_tokens": ("Tokens", int),
    "max_dollars": ("Dollars", float),
    "timeout_seconds": ("Active seconds", float),
    "max_verifier_rejections": ("Verifier rejections", int),
}
"""Every stop condition the API takes: its label and the kind of number it is."""


def parse_limits(data: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The limits filled in (an empty field: no limit of that kind) and an error per bad field."""
    limits: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, (label, kind) in LIMIT_FIELDS.items():
        text = (data.get(name) or "").strip()
        if not text:
            continue
        try:
            value = int(text) if kind is int else float(text)
        except ValueError:
            errors[name] = f"{label} must be a {'whole ' if kind is int else ''}number."
            continue
        if not math.isfinite(value):
            errors[name] = f"{label} must be a number."
            continue
        limits[name] = value
    try:
        StopIn.model_validate(limits)
    except ValidationError as exc:
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else ""
            label = LIMIT_FIELDS.get(name, (name, int))[0]
            errors.setdefault(name, f"{label}: {_wording(error)}")
            limits.pop(name, None)
    return limits, errors


def _wording(error: Mapping[str, Any]) -> str:
    """What is wrong, as a sentence ("Input should be greater than 0.")."""
    message = validation_words(error)
    return message if message.endswith(".") else message + "."


@dataclass
class StartForm:
    """The start-a-run form: what was typed, what is wrong with it, and the checked request.

    ``run_id`` is a hidden field made when the form is shown: submitting the same form
    twice (a double click, a resent POST) returns the run it started, as a repeated
    ``POST /runs`` with a ``run_id`` does.
    """

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    request: RunStartIn | None = None
    tenant_id: str = ""

    @classmethod
    def blank(cls, *, agents: list[str]) -> StartForm:
        """A fresh form, with a new run id and the first agent chosen."""
        return cls(values={"run_id": uuid.uuid4().hex, "agent": agents[0] if len(agents) == 1 else ""})

    @classmethod
    def read(cls, data: Mapping[str, str], *, tenants: list[str]) -> StartForm:
        """Parse a submitted form; ``tenants`` are those the user may start runs in."""
        names = ("tenant", "agent", "goal", "run_id", *LIMIT_FIELDS)
        values = {name: str(data.get(name) or "") for name in names}
        form = cls(values=values)
        form.tenant_id = values["tenant"] or (tenants[0] if len(tenants) == 1 else "")
        if not form.tenant_id:
            form.errors["tenant"] = "Choose a tenant."
        limits, limit_errors = parse_limits(values)
        form.errors.update(limit_errors)
        try:
            request = RunStartIn.model_validate(
                {
                    "agent": values["agent"],
                    "goal": values["goal"],
                    "run_id": values["run_id"] or None,
                    "limits": limits or None,
                }
            )
        except ValidationError as exc:
            for error in exc.errors():
                name = str(error["loc"][0]) if error["loc"] else ""
                form.errors.setdefault(name, _START_WORDS.get(name, _wording(error)))
            if "run_id" in form.errors:
                form.again()
            return form
        if not form.errors:
            form.request = request
        return form

    def limits(self) -> dict[str, Any] | None:
        """The checked limits, as the service takes them (None: the agent's own)."""
        given = self.request.limits if self.request is not None else None
        return given.limits() if given is not None else None

    def again(self) -> None:
        """After a clash with another run's id: a new id, so the next submit starts a run."""
        self.values["run_id"] = uuid.uuid4().hex

    def refused(self, exc: KeelgateError, text: str) -> None:
        """The service refused the request: ``text`` (the console's words for ``exc``) goes on
        the field it is about, or above the form; a clash of run ids gets a new id."""
        field_name = next((name for cls, name in _FIELD_OF.items() if isinstance(exc, cls)), "")
        self.errors[field_name] = text
        if isinstance(exc, RunExistsError):
            self.again()


_FIELD_OF: dict[type[KeelgateError], str] = {
    UnknownAgentError: "agent",
    GoalNotUnderstoodError: "goal",
    RunExistsError: "run_id",
}
"""The field each refusal of ``run_start`` is about (worded in ``sitekit.console_errors``)."""

_START_WORDS = {
    "agent": "Choose one of the registered agents.",
    "goal": "Say what the agent should do (up to 4,000 characters).",
    "run_id": "This form is out of date: submit it again.",
}
