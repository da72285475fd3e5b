"""What the console tells an operator when an error refuses what they asked: one mapping.

The API answers every error with its code, fixed wording and ``http_status`` in one
handler (``keelgate_site/api.py``). The console answers the same errors to a person at
a card, in the card's own terms: "type approve in the confirmation box" where the API
says "confirm it explicitly", and whether the card stays so they can try again. Those
words live here, one entry per error class, found along the class tree as
``http_status`` is: an error without an entry of its own is worded as its nearest
ancestor that has one. An error with no entry on its path says its fixed wording, and
leaves the card as it was (nothing says the item changed).

The status is the error's own, except that a request the person must correct (the
API's 422) is a 400 on the console: ``templates/base.html`` lets htmx swap 400 and
409 answers into the card, and a 400 shows its wording inside the card's form.

Every console view that catches an error words it through :func:`refusal_or_raise`: the
inbox's cards (``approvals.views``), the flash back on a run's page after cancel or resume
(``sitekit.pages.flash_refusal``), and the start form, which puts the words on the field
the error is about (``runs.forms.StartForm.refused``), as the webhooks page's register form
does (``notifications.views``).

Not found and forbidden are answered by the page (``console_page``: 404, 403), never
on a card, so a guessed URL learns nothing; their entries word them in a bulk
decision's result list, where each line is one item of the person's own choosing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from keelgate.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalEscalatedError,
    ApprovalExpiredError,
    ApprovalStaleError,
    ApproverRoleError,
    CallMayBeRunningError,
    ConfirmationRequiredError,
    DuplicateApproverError,
    EditInvalidError,
    InvalidResultError,
    KeelgateError,
    NoteRequiredError,
    RunError,
    RunExistsError,
    RunFinishedError,
)
from sitekit.errors import (
    ApprovalWithdrawnError,
    BulkNotAllowedError,
    ForbiddenError,
    GoalNotUnderstoodError,
    NotFoundError,
    NotResumableError,
    StandingRuleEndedError,
    StandingRuleInvalidError,
    UnknownAgentError,
    WebhookDeliveryUnfinishedError,
    WebhookUrlRefusedError,
)

__all__ = ["WORDING", "Level", "Refusal", "Wording", "refusal", "refusal_line", "refusal_or_raise"]

Level = Literal["success", "info", "warning", "error"]
"""A flash's level (``templates/console/_flash.html``)."""


@dataclass(frozen=True)
class Wording:
    """How the console words one error class; ``{detail}`` and ``{message}`` are the error's."""

    text: str = "{message}"
    """The flash: a sentence for the person at the card."""
    line: str = "not decided: {code}"
    """The same refusal as one line of a bulk decision's result list."""
    level: Level = "error"
    keep: bool = False
    """The card stays, with what was typed: the person can correct it, or try again later.
    Otherwise the item is settled or out of their hands, and its card goes."""
    keep_typed: bool = False
    """Settled by someone or something else while the person typed: the card stays only if
    they typed something, to show it to them again (nothing of theirs was applied)."""
    unnamed: str = ""
    """What ``{detail}`` reads when the error names nobody (who decided, which role)."""


WORDING: dict[type[KeelgateError], Wording] = {
    # What the person sent must change: the card stays with what they typed.
    NoteRequiredError: Wording("A reason is required: say why in the note.", keep=True),
    EditInvalidError: Wording("The edited arguments do not fit the tool: {detail}.", keep=True),
    ConfirmationRequiredError: Wording(
        "This call is high impact: type approve in the confirmation box to approve it.", keep=True
    ),
    InvalidResultError: Wording("{message} ({detail})", keep=True),
    # The item changed under the person: look again, or wait.
    ApprovalStaleError: Wording(
        "The call changed since this page was loaded: nothing was approved. Check it again.",
        "not decided: the call changed since the page was loaded",
        level="warning",
        keep=True,
    ),
    CallMayBeRunningError: Wording(
        "The call may still be running (until {detail}): try again after that.", level="warning", keep=True
    ),
    # Settled, or out of this person's hands: the card goes.
    AlreadyDecidedError: Wording(
        "Already settled by {detail}.",
        "not decided: already settled by {detail}",
        level="warning",
        keep_typed=True,
        unnamed="someone else",
    ),
    ApprovalWithdrawnError: Wording(
        "Withdrawn: {detail} cancelled the run while this waited, so nobody decides it.",
        "not decided: withdrawn, the run was cancelled",
        level="warning",
        keep_typed=True,
        unnamed="someone",
    ),
    DuplicateApproverError: Wording(
        "You already approved this: a different person must approve it too.",
        "not decided: you already approved it",
        level="warning",
    ),
    ApprovalExpiredError: Wording(
        "This approval expired: it is denied (fail closed).",
        "not decided: it expired (denied, fail closed)",
        level="warning",
        keep_typed=True,
    ),
    ApprovalEscalatedError: Wording(
        "This approval was escalated at its deadline: deciding it now takes the {detail} role.",
        "not decided: it was escalated to a role you do not hold",
        level="warning",
        unnamed="admin",
    ),
    ApproverRoleError: Wording(
        "Only a decision by someone with the {detail} role counts for this call: yours was not recorded.",
        "not decided: it takes the {detail} role",
        level="warning",
        unnamed="approval's",
    ),
    StandingRuleInvalidError: Wording(
        "Nothing was done: the standing rule could not work as written ({detail}).", keep=True
    ),
    StandingRuleEndedError: Wording(
        "That standing rule was revoked or has expired: it cannot change.", level="warning"
    ),
    RunFinishedError: Wording("Not cancelled: the run has already finished.", level="warning"),
    NotResumableError: Wording(
        "Not resumed: the run is {detail}, and only a stopped run can be resumed.",
        level="warning",
        unnamed="not stopped",
    ),
    # The start form's: the form puts each on the field it is about (``runs.forms.StartForm``).
    UnknownAgentError: Wording("Choose one of the registered agents.", keep=True),
    GoalNotUnderstoodError: Wording(
        "The agent cannot read that goal: {detail}.", keep=True, unnamed="say it in other words"
    ),
    RunExistsError: Wording(
        "This form already started another run: check it and submit again.", level="warning", keep=True
    ),
    # The webhooks page's: the register form puts the first on its URL field.
    WebhookUrlRefusedError: Wording("That URL is refused: {detail}.", keep=True, unnamed="not allowed"),
    WebhookDeliveryUnfinishedError: Wording(
        "Not sent again: the message is still due or being sent. Redeliver it once it has finished.",
        level="warning",
    ),
    ApprovalError: Wording(),  # not waiting for a decision any more: the card goes
    RunError: Wording(),  # e.g. not reconcilable: the item is no longer one
    # Refusals of one item in a bulk decision (not found and forbidden are the page's on a card).
    BulkNotAllowedError: Wording(
        line="not decided: {detail}",
        level="warning",
        unnamed="high-impact and M-of-N calls are decided one at a time",
    ),
    NotFoundError: Wording(line="not decided: not found"),
    ForbiddenError: Wording(line="not decided: your role cannot decide it"),
}


_UNNAMED = Wording(keep=True)
"""An error no entry names, on its path: its fixed wording, the card left as it was."""


@dataclass(frozen=True)
class Refusal:
    """One error as the console tells it on a card."""

    status: int
    level: Level
    text: str
    keep: bool
    keep_typed: bool


def _wording(exc: KeelgateError) -> Wording:
    for cls in type(exc).__mro__:
        if cls in WORDING:
            return WORDING[cls]
    return _UNNAMED


def _fill(template: str, exc: KeelgateError, unnamed: str) -> str:
    return template.format(detail=exc.detail or unnamed, message=exc.message, code=exc.code)


def refusal(exc: KeelgateError) -> Refusal | None:
    """How the console tells ``exc`` on a card, or None where a card is not the answer.

    None for not found and forbidden (the page's 404 and 403) and for an error that is
    never the caller's doing (no ``http_status``: a bug, a 500).
    """
    if exc.http_status is None or isinstance(exc, (NotFoundError, ForbiddenError)):
        return None
    wording = _wording(exc)
    status = 400 if exc.http_status == 422 else exc.http_status
    text = _fill(wording.text, exc, wording.unnamed)
    return Refusal(status, wording.level, text, wording.keep, wording.keep_typed)


def refusal_line(exc: KeelgateError) -> str:
    """``exc`` as one line of a list of items, each decided on its own ("not decided: ...")."""
    wording = _wording(exc)
    return _fill(wording.line, exc, wording.unnamed)


def refusal_or_raise(exc: KeelgateError) -> Refusal:
    """How the console tells ``exc``; re-raised where a page is the answer, not a flash or a card.

    Not found and forbidden become the 404 and 403 pages (``sitekit.pages.console_page``),
    and an error that is never the caller's doing a 500, whatever view they reach.
    """
    told = refusal(exc)
    if told is None:
        raise exc
    return told
