"""The page a link in an email opens: the call, then a decision only when its recipient confirms.

A GET shows; only the form's POST (CSRF) decides, through
:func:`notifications.emails.links.link_decide`. Both need the console's login
(``console_page`` sends a visitor to log in with ``next=`` this page), and both answer
each state of the link with its status: 404 unknown or altered, 403 someone else's
(nothing of the call shown) or a role that no longer decides it, 410 used or expired,
409 decided, edited or changed since the message; 200 the call and its form.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from approvals.forms import DecisionForm
from approvals.models import Approval, ApprovalStatus
from keelgate.errors import KeelgateError
from notifications.emails.links import Opened, link_decide, link_open
from sitekit.console_errors import refusal_or_raise
from sitekit.pages import console_page

STATUS = {
    "": 200,
    "unknown": 404,
    "not_yours": 403,
    "not_allowed": 403,
    "used": 410,
    "expired": 410,
    "decided": 409,
    "edited": 409,
    "changed": 409,
}
"""The answer's status for each :data:`~notifications.emails.links.Problem`."""


@require_http_methods(["GET", "POST"])
@console_page
def decision_link(request: HttpRequest, token: str) -> HttpResponse:
    """Open a decision link (GET: show the call) or decide through it (POST: the form)."""
    if request.method != "POST":
        return _page(request, link_open(token=token, user=request.user, request=request))
    decision = request.POST.get("decision", "")
    if decision not in ("approve", "deny"):
        opened = link_open(token=token, user=request.user, request=request, attempt=True)
        return _page(request, opened, error="Choose approve or deny." if not opened.problem else "")
    form = DecisionForm.read(request.POST, decision="approve" if decision == "approve" else "deny", fields=())
    if form.problem or request.POST.get("edit"):
        opened = link_open(token=token, user=request.user, request=request, attempt=True)
        problem = form.problem or "Edits are made in the console."
        return _page(request, opened, error=problem if not opened.problem else "", typed=form.typed)
    try:
        done = link_decide(
            token=token,
            user=request.user,
            decision="approve" if decision == "approve" else "deny",
            note=form.note,
            confirmed=form.confirmed,
            request=request,
        )
    except KeelgateError as exc:
        told = refusal_or_raise(exc)
        opened = link_open(token=token, user=request.user, request=request, audit=False)
        return _page(request, opened, error=told.text, status=told.status, typed=form.typed)
    if done.approval is None:
        return _page(request, done.opened)
    return _page(request, done.opened, done=_done_text(done.opened, done.approval, decision))


def _page(
    request: HttpRequest,
    opened: Opened,
    *,
    error: str = "",
    done: str = "",
    status: int | None = None,
    typed: dict[str, str] | None = None,
) -> HttpResponse:
    context: dict[str, Any] = {
        "problem": opened.problem,
        "error": error,
        "done": done,
        "note": (typed or {}).get("note_approve") or (typed or {}).get("note_deny") or "",
    }
    approval = opened.approval
    if approval is not None:  # only ever for the link's own recipient
        context["approval"] = approval
        context["said"] = _problem_text(opened) if opened.problem else ""
    elif opened.problem:
        context["said"] = _problem_text(opened)
    answer = STATUS[opened.problem] if status is None or opened.problem else status
    response = render(request, "notifications/decision_link.html", context, status=answer)
    response.headers["Referrer-Policy"] = "no-referrer"  # the token is in this page's URL
    return response


def _problem_text(opened: Opened) -> str:
    """What the page says of a link that decides nothing (never a detail of someone else's call)."""
    link, approval = opened.link, opened.approval
    problem = opened.problem
    if problem == "unknown":
        return "This link is not known: it may be mistyped, altered or too old. Decide in the console."
    if problem == "not_yours":
        return (
            "This link was sent to someone else, and works only for them: it does nothing for you."
            " If it was meant for you, ask for the item to be decided in the console."
        )
    if problem == "not_allowed":
        return (
            "Your role no longer decides this call (or you approved it already and another person"
            " must): nothing was done."
        )
    assert link is not None and approval is not None
    if problem == "used":
        did = {"approve": "to approve", "deny": "to deny"}.get(link.decision, "")
        when = link.used_at.strftime("%Y-%m-%d %H:%M UTC") if link.used_at else ""
        return f"This link was used already ({when}{', ' + did if did else ''}): a link works once."
    if problem == "expired":
        return "This link has expired (the call's deadline passed, or the link's own). See the console."
    if problem == "edited":
        return (
            "The call was edited after this email was sent, so this link decides nothing:"
            " the edited call waits in the console."
        )
    if problem == "decided":
        who = f" by {approval.decided_by}" if approval.decided_by else ""
        state = _SETTLED.get(approval.status, approval.status)
        return f"This call was {state}{who} after this email was sent: there is nothing left to decide."
    return (
        "The call's arguments changed after this email was sent, so this link decides nothing."
        " Look at the call again in the console."
    )


_SETTLED: dict[str, str] = {
    ApprovalStatus.APPROVED: "approved",
    ApprovalStatus.DENIED: "denied",
    ApprovalStatus.WITHDRAWN: "withdrawn (its run was cancelled)",
}


def _done_text(opened: Opened, decided: Approval, decision: str) -> str:
    approval = opened.approval
    assert approval is not None
    if decided.status == ApprovalStatus.PENDING:
        left = decided.required - len(decided.votes)
        return f"Your approval is recorded: {left} more approver{'s' if left != 1 else ''} needed."
    verb = "Approved" if decision == "approve" else "Denied"
    return f"{verb} {approval.tool} in run {approval.run_id}: the run is queued."
