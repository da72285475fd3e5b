"""Verifiers judge a proposed final answer. Their verdict steers; it never authorises."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from keelgate._state import PlannedAction
from keelgate._types import ActionStatus

__all__ = [
    "AcceptAllVerifier",
    "CallableVerifier",
    "GroundedAnswerVerifier",
    "Verdict",
    "VerdictDecision",
    "Verifier",
    "VerifyRequest",
    "as_verdict",
]


class VerdictDecision(StrEnum):
    """A verifier's answer: ACCEPT, REVISE or REJECT."""

    ACCEPT = "accept"
    REVISE = "revise"
    REJECT = "reject"


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of a proposed final answer.

    Accept, revise or reject, with reasons and flags. It steers the loop but can never
    authorise an action.
    """

    decision: VerdictDecision
    reasons: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()

    @classmethod
    def accept(cls, *reasons: str) -> Verdict:
        """An ACCEPT verdict."""
        return cls(VerdictDecision.ACCEPT, reasons)

    @classmethod
    def revise(cls, *reasons: str) -> Verdict:
        """A REVISE verdict."""
        return cls(VerdictDecision.REVISE, reasons)

    @classmethod
    def reject(cls, *reasons: str, flags: Iterable[str] = ()) -> Verdict:
        """A REJECT verdict."""
        return cls(VerdictDecision.REJECT, reasons, tuple(flags))


@dataclass(frozen=True)
class VerifyRequest:
    """What the verifier is given.

    The goal, the proposed answer, the actions taken this step and the (untrusted)
    observations.
    """

    goal: str
    answer: str
    actions: Sequence[PlannedAction] = ()
    observations: Sequence[str] = field(default_factory=tuple)


@runtime_checkable
class Verifier(Protocol):
    """Judges a proposed final answer.

    Its verdict steers the loop but can never authorise an action. A verifier that
    cannot be understood counts as a rejection.
    """

    def verify(self, request: VerifyRequest) -> Verdict | Awaitable[Verdict]:
        """Judge ``request.answer``; may be a coroutine function."""
        ...


UNPARSEABLE = "verifier_unparseable"


def as_verdict(value: object) -> Verdict:
    """Read a Verdict, a decision, a decision name or a bool; anything else is a rejection."""
    if isinstance(value, Verdict) and isinstance(value.decision, VerdictDecision):
        return value
    if isinstance(value, VerdictDecision):
        return Verdict(value)
    if isinstance(value, bool):
        return Verdict.accept() if value else Verdict.reject("the verifier said no")
    if isinstance(value, str):
        try:
            return Verdict(VerdictDecision(value.strip().lower()))
        except ValueError:
            pass
    return Verdict.reject("the verifier's answer could not be understood", flags=[UNPARSEABLE])


class AcceptAllVerifier:
    """Accepts everything. For tests and loops where nothing needs checking."""

    def verify(self, request: VerifyRequest) -> Verdict:
        """Always ACCEPT."""
        return Verdict.accept()


class CallableVerifier:
    """Wraps a plain function (sync or async) returning a Verdict, a decision or a bool."""

    def __init__(self, fn: Callable[[VerifyRequest], Any]) -> None:
        self._fn = fn

    async def verify(self, request: VerifyRequest) -> Verdict:
        """Call the function and read its answer with :func:`as_verdict`."""
        value = self._fn(request)
        if inspect.isawaitable(value):
            value = await value
        return as_verdict(value)


_NUMBER = re.compile(r"(?<![\w.])[-+]?\$?\d[\d,]*(?:\.\d+)?%?")
_CLAIM = re.compile(r"\b(bought|sold|placed|executed|purchased|ordered)\b", re.IGNORECASE)
_NEGATION = re.compile(
    r"\b(not|never|no|nothing|none|didn't|did not|wasn't|was not|couldn't|could not|unable|failed)\b",
    re.IGNORECASE,
)


_NEGATION_WINDOW = 5
"""A negation this many words before a claim ("was not placed", "never executed") denies it."""


def _claims(answer: str) -> tuple[bool, bool]:
    """Whether the answer asserts a write, and whether it denies one.

    Each claim word counts as denied when a negation stands among the few words before
    it, so "Bought 10 ACME; no further orders" asserts and "was not placed" denies.
    """
    asserted = denied = False
    for match in _CLAIM.finditer(answer):
        before = answer[: match.start()].split()[-_NEGATION_WINDOW:]
        if _NEGATION.search(" ".join(before)):
            denied = True
        else:
            asserted = True
    return asserted, denied


def _numbers(text: str) -> set[str]:
    found = set()
    for raw in _NUMBER.findall(text):
        cleaned = raw.strip("$%+").replace(",", "")
        if cleaned.startswith("-"):
            cleaned = cleaned[1:]
        if "." in cleaned:
            cleaned = cleaned.rstrip("0").rstrip(".")
        found.add(cleaned)
    return found


class GroundedAnswerVerifier:
    """A deterministic verifier: is the final answer supported by what the tools returned?

    Two rules, both cheap and both explainable:

    - **Grounded figures.** Every number in the answer (other than a small whole number
      such as "3") must appear in the goal or in a tool observation. A fabricated or
      transposed price has nowhere to come from.
    - **Honest claims.** If ``write_tools`` is given and the answer says something was
      bought, sold, placed or executed (and does not say it did not), at least one of
      those tools must have actually completed; and an answer that says it was *not*
      while one of them did complete is the opposite lie, refused too.

    It cannot judge meaning, so it is a floor under a model-based verifier, not a
    replacement. It never authorises anything: only the gateway does that.
    """

    def __init__(self, *, write_tools: Iterable[str] = (), small_number: int = 10) -> None:
        self._write_tools = frozenset(write_tools)
        self._small = small_number

    def verify(self, request: VerifyRequest) -> Verdict:
        """REJECT an ungrounded figure or a claimed write that did not complete."""
        reasons: list[str] = []
        flags: list[str] = []
        known = _numbers(request.goal)
        for text in request.observations:
            known |= _numbers(text)
        for number in sorted(_numbers(request.answer)):
            if number.isdigit() and int(number) <= self._small:
                continue
            if number not in known:
                reasons.append(f"the figure {number} appears in no observation or in the goal")
                flags.append("ungrounded_figure")
        if self._write_tools and _CLAIM.search(request.answer):
            asserted, denied = _claims(request.answer)
            done = any(a.tool in self._write_tools and a.status is ActionStatus.DONE for a in request.actions)
            if asserted and not done:
                reasons.append("the answer claims a write that did not complete")
                flags.append("unsupported_claim")
            if denied and not asserted and done:
                reasons.append("the answer denies a write that completed")
                flags.append("denied_completed_write")
        if reasons:
            return Verdict(VerdictDecision.REJECT, tuple(reasons), tuple(sorted(set(flags))))
        return Verdict.accept()
