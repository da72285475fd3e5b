"""The inbox and the decisions taken from it: approve, deny, reconcile.

Views parse the form, call one service and render what happened; every write goes
through ``approvals.services``. A decision form works with and without JavaScript:
htmx posts it and swaps the item in place (a settled item disappears, a flash says
what happened), a plain post redirects back with the same flash.

The cards and sections themselves are :mod:`approvals.cards`, which the websocket
consumer renders too.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Literal

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from approvals.cards import InboxEntry, InboxView, approval_entry, inbox_sections, render_entry, unknown_entry
from approvals.edit_form import PREFIX, parse_edit
from approvals.models import UnknownOutcome
from approvals.queue import EXPIRING_SOON, PAGE_SIZE, filter_choices
from approvals.selectors import approval_get, inbox_counts, recently_decided, unknown_outcomes_for
from approvals.services import (
    BULK_MAX,
    BulkResult,
    approval_decide,
    approvals_decide_bulk,
    run_cancel,
    unknown_check,
    unknown_reconcile,
)
from audit.selectors import audit_heads
from keelgate.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalEscalatedError,
    ApprovalExpiredError,
    ApprovalStaleError,
    CallMayBeRunningError,
    ConfirmationRequiredError,
    DuplicateApproverError,
    EditInvalidError,
    InvalidResultError,
    KeelgateError,
    NoteRequiredError,
    NotReconcilableError,
    RunFinishedError,
)
from sitekit.errors import BulkNotAllowedError, ForbiddenError, NotFoundError
from sitekit.pages import console_page
from tenants.selectors import memberships, tenant_ids

NOTE_MAX = 2000

Level = Literal["success", "info", "warning", "error"]


@require_GET
@console_page
def inbox(request: HttpRequest) -> HttpResponse:
    """Unknown outcomes, then approvals soonest-expiring first, filtered and paged, live."""
    by_tenant = memberships(request)
    ids = list(by_tenant)
    # The chain heads first: anything committed after this read is replayed over the
    # websocket, so an item can arrive twice (harmless) but never be missed.
    since = audit_heads(ids)
    view = InboxView.parse(request.GET)
    sections = inbox_sections(
        roles={t: m.role for t, m in by_tenant.items()},
        username=request.user.get_username(),
        view=view,
        now=timezone.now(),
    )
    return render(
        request,
        "approvals/inbox.html",
        {
            "s": sections,
            "approvals": sections.approvals,
            "unknowns": sections.unknowns,
            "view": view,
            "filter": view.filter,
            "choices": filter_choices(tenant_ids=ids),
            "nav_counts": inbox_counts(tenant_ids=ids) if view.filter.active else sections.counts,
            "since_json": json.dumps(since, sort_keys=True),
            "socket_query": view.query(),
            "has_tenants": bool(ids),
            "recent": recently_decided(tenant_ids=ids),
            "live_items": True,
            "page_size": PAGE_SIZE,
            "expiring_minutes": int(EXPIRING_SOON.total_seconds() // 60),
        },
    )


@require_POST
@console_page
def bulk_decide(request: HttpRequest) -> HttpResponse:
    """Approve or deny the selected approvals, each its own decision; list what happened."""
    decision = request.POST.get("decision", "")
    note = request.POST.get("note", "")
    choices: dict[int, str | None] = {}
    for value in request.POST.getlist("ids")[:BULK_MAX]:
        pk, _, seen = value.partition(":")
        if pk.isdigit() and 0 < int(pk) <= 2**63 - 1:
            choices[int(pk)] = seen[:64] or None
    if decision not in ("approve", "deny"):
        return _bulk_reply(request, [], "error", "Choose approve or deny.", status=400)
    if not choices:
        return _bulk_reply(request, [], "warning", "Select at least one approval first.", status=400)
    if len(note) > NOTE_MAX:
        return _bulk_reply(
            request, [], "error", f"The note is longer than {NOTE_MAX} characters.", status=400
        )
    try:
        results = approvals_decide_bulk(
            tenant_ids=tenant_ids(request),
            choices=choices,
            user=request.user,
            decision="approve" if decision == "approve" else "deny",
            note=note,
        )
    except NoteRequiredError:
        return _bulk_reply(request, [], "error", "A reason is required to deny.", status=400)
    done = sum(1 for r in results if r.status != "refused")
    verb = "Approved" if decision == "approve" else "Denied"
    text = f"{verb} {done} of {len(results)}."
    if done < len(results):
        text += " The others were left as they were: see each below."
    return _bulk_reply(request, results, "success" if done == len(results) else "warning", text)


BULK_WORDS = {
    "approved": "approved",
    "denied": "denied",
    "pending": "approval recorded; another approver is needed",
    "expired": "expired before it was decided",
    "withdrawn": "withdrawn",
}
BULK_REFUSALS = {
    BulkNotAllowedError.code: "not decided: high-impact and four-eyes calls are decided one at a time",
    AlreadyDecidedError.code: "not decided: already settled by {detail}",
    NotFoundError.code: "not decided: not found",
    ForbiddenError.code: "not decided: your role cannot decide it",
    ApprovalStaleError.code: "not decided: the call changed since the page was loaded",
    ApprovalExpiredError.code: "not decided: it expired (denied, fail closed)",
    DuplicateApproverError.code: "not decided: you already approved it",
    ApprovalEscalatedError.code: "not decided: it was escalated to a role you do not hold",
}


def _bulk_lines(results: list[BulkResult]) -> list[str]:
    lines = []
    for r in results:
        what = f"{r.tool} in run {r.run_id}" if r.tool else f"approval {r.approval_id}"
        if r.status == "refused":
            words = BULK_REFUSALS.get(r.code, "not decided: {code}")
            lines.append(f"{what}: {words.format(detail=r.detail or 'someone else', code=r.code)}")
        else:
            lines.append(f"{what}: {BULK_WORDS.get(r.status, r.status)}")
    return lines


def _bulk_reply(
    request: HttpRequest, results: list[BulkResult], level: Level, text: str, *, status: int = 200
) -> HttpResponse:
    """htmx: the result list, cards of decided items removed; otherwise a redirect back."""
    lines = _bulk_lines(results)
    if request.headers.get("HX-Request") == "true":
        gone = [f"item-a-{r.approval_id}" for r in results if r.status not in ("refused", "pending")]
        html = render_to_string(
            "approvals/_bulk_result.html", {"level": level, "text": text, "lines": lines, "gone": gone}
        )
        return HttpResponse(html, status=status)
    getattr(messages, level)(request, " ".join([text, *lines]))
    return HttpResponseRedirect(_back(request), status=303)


def _back(request: HttpRequest) -> str:
    """Where a plain (no-JS) post returns to: its ``next`` if it is this site's, else the inbox."""
    target = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if safe else reverse("inbox")


# -- decisions ---------------------------------------------------------------------------


@require_POST
@console_page
def approve(request: HttpRequest, pk: int) -> HttpResponse:
    """Approve one pending approval (optional note)."""
    return _decide(request, pk, "approve")


@require_POST
@console_page
def deny(request: HttpRequest, pk: int) -> HttpResponse:
    """Deny one pending approval (a reason is required: the planner reads it)."""
    return _decide(request, pk, "deny")


def _decide(request: HttpRequest, pk: int, decision: Literal["approve", "deny"]) -> HttpResponse:
    row = approval_get(tenant_ids=tenant_ids(request), approval_id=pk)
    role = memberships(request)[row.tenant_id].role
    username = request.user.get_username()
    note = request.POST.get("note", "")
    entry = approval_entry(row, role=role, username=username)
    values = {k: str(v) for k, v in request.POST.items() if k.startswith(PREFIX)}
    if len(note) > NOTE_MAX:
        return _reply(
            request, entry, 400, "error", f"The note is longer than {NOTE_MAX} characters.", keep=True
        )
    seen = request.POST.get("arguments_hash") or None
    arguments = None
    if decision == "approve" and request.POST.get("edit") == "1":
        arguments, problems = parse_edit(list(entry.fields), request.POST)
        if problems or not entry.fields:
            text = "The edit cannot be read: " + ("; ".join(problems) or "no form for this tool") + "."
            return _reply(request, entry, 400, "error", text, keep=True, values=values)
    try:
        decided = approval_decide(
            tenant_id=row.tenant_id,
            approval_id=row.pk,
            user=request.user,
            decision=decision,
            note=note,
            arguments=arguments,
            seen=seen,
            confirmed=request.POST.get("confirm", "").strip().lower() == "approve",
        )
    except NoteRequiredError:
        return _reply(request, entry, 400, "error", "A reason is required to deny.", keep=True)
    except EditInvalidError as exc:
        text = f"The edited arguments do not fit the tool: {exc.detail}."
        return _reply(request, entry, 400, "error", text, keep=True, values=values)
    except ConfirmationRequiredError:
        text = "This call is high impact: type approve in the confirmation box to approve it."
        return _reply(request, entry, 400, "error", text, keep=True, values=values)
    except ApprovalStaleError:
        text = "The call changed since this page was loaded: nothing was approved. Check it again."
        return _reply(request, entry, 409, "warning", text, keep=True, values=values)
    except AlreadyDecidedError as exc:
        text = f"Already settled by {exc.detail or 'someone else'}."
        if values or note.strip():  # what this person typed stays on screen, with the reason
            typed = {**values, f"note_{decision}": note}
            text += " Nothing of yours was applied; what you typed is below."
            return _reply(request, entry, 409, "warning", text, keep=True, values=typed)
        return _reply(request, entry, 409, "warning", text)
    except DuplicateApproverError:
        return _reply(
            request,
            entry,
            409,
            "warning",
            "You already approved this: a different person must approve it too.",
        )
    except ApprovalExpiredError:
        return _reply(request, entry, 409, "warning", "This approval expired: it is denied (fail closed).")
    except ApprovalEscalatedError as exc:
        role = exc.detail or "admin"
        text = f"This approval was escalated at its deadline: deciding it now takes the {role} role."
        return _reply(request, entry, 403, "warning", text)
    except ApprovalError as exc:
        return _reply(request, entry, 409, "error", exc.message)
    edited = decided.pk != row.pk  # this request's edit replaced the call with a new one
    if decided.status == "pending":
        left = decided.required - len(decided.votes)
        text = f"Your approval is recorded: {left} more approver{'s' if left != 1 else ''} needed."
        if edited:
            text = f"Your edit is recorded and approved by you: {left} more approver needed for it."
        return _reply(
            request, approval_entry(decided, role=role, username=username), 200, "info", text, keep=True
        )
    if edited:
        text = f"Approved {row.tool} in run {row.run_id} with your edit: the original will not run."
        return _reply(request, entry, 200, "success", text)
    verb = "Approved" if decision == "approve" else "Denied"
    return _reply(
        request, entry, 200, "success", f"{verb} {row.tool} in run {row.run_id}: the run is queued."
    )


@require_POST
@console_page
def run_cancel_view(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """Cancel a run from its page (an approver); back to the page with what happened."""
    back = reverse("run", args=[tenant_id, run_id])
    note = request.POST.get("note", "")[:NOTE_MAX]
    try:
        run = run_cancel(tenant_id=tenant_id, run_id=run_id, user=request.user, note=note)
    except RunFinishedError:
        messages.warning(request, "Not cancelled: the run has already finished.")
        return HttpResponseRedirect(back, status=303)
    if run.status == "cancelled":
        messages.success(
            request, "Cancelled: the run will not continue; its waiting approvals were withdrawn."
        )
    else:
        messages.info(request, "Cancel asked: the worker stops the run at its next step.")
    return HttpResponseRedirect(back, status=303)


def _unknown_card(request: HttpRequest, pk: int) -> tuple[UnknownOutcome, InboxEntry]:
    """The unknown outcome the user may see (NotFoundError otherwise) and its card."""
    by_tenant = memberships(request)
    row = unknown_outcomes_for(tenant_ids=list(by_tenant), settled=None).filter(pk=pk).first()
    if row is None:
        raise NotFoundError()
    return row, unknown_entry(row, role=by_tenant[row.tenant_id].role)


@require_POST
@console_page
def reconcile(request: HttpRequest, pk: int) -> HttpResponse:
    """Settle an unknown outcome as executed or not executed, with a required note."""
    row, entry = _unknown_card(request, pk)
    executed_text = request.POST.get("executed", "")
    note = request.POST.get("note", "")
    result_text = request.POST.get("result", "").strip()
    values = {"executed": executed_text, "note": note, "result": result_text}
    if executed_text not in ("yes", "no"):
        return _reply(
            request, entry, 400, "error", "Say whether the call was executed.", keep=True, values=values
        )
    if len(note) > NOTE_MAX:
        return _reply(
            request, entry, 400, "error", f"The note is longer than {NOTE_MAX} characters.", keep=True
        )
    result, problem = _json_object(result_text)
    if problem:
        return _reply(request, entry, 400, "error", problem, keep=True, values=values)
    if result is not None and executed_text != "yes":
        text = "A result is only recorded for a call that was executed."
        return _reply(request, entry, 400, "error", text, keep=True, values=values)
    try:
        unknown_reconcile(
            tenant_id=row.tenant_id,
            item_id=row.pk,
            user=request.user,
            executed=executed_text == "yes",
            note=note,
            result=result,
        )
    except NoteRequiredError:
        return _reply(request, entry, 400, "error", "A note is required.", keep=True, values=values)
    except InvalidResultError as exc:
        return _reply(request, entry, 400, "error", f"{exc.message} ({exc.detail})", keep=True, values=values)
    except AlreadyDecidedError as exc:
        return _reply(request, entry, 409, "warning", f"Already settled by {exc.detail or 'someone else'}.")
    except CallMayBeRunningError as exc:
        text = f"The call may still be running (until {exc.detail}): try again after that."
        return _reply(request, entry, 409, "warning", text, keep=True)
    except (ForbiddenError, NotFoundError):
        raise  # 403 / 404 through console_page
    except (NotReconcilableError, KeelgateError) as exc:
        return _reply(request, entry, 409, "error", exc.message)
    verdict = "executed" if executed_text == "yes" else "not executed"
    recorded = " with the result you found" if result is not None else ""
    text = f"Recorded {row.tool} in run {row.run_id} as {verdict}{recorded}."
    return _reply(request, entry, 200, "success", text)


@require_POST
@console_page
def check(request: HttpRequest, pk: int) -> HttpResponse:
    """Ask the system of record about an unknown outcome and pre-fill the form with its answer."""
    row, entry = _unknown_card(request, pk)
    try:
        found = unknown_check(tenant_id=row.tenant_id, item_id=row.pk, user=request.user)
    except AlreadyDecidedError as exc:
        return _reply(request, entry, 409, "warning", f"Already settled by {exc.detail or 'someone else'}.")
    label = entry.lookup or "the system of record"
    if found.verdict == "executed":
        record = json.dumps(found.record, sort_keys=True)
        text = f"{label[:1].upper()}{label[1:]} has this call: it was executed. Check it, then record it."
        values = {"executed": "yes", "result": record, "note": f"found in {label} by its key"}
        return _reply(request, entry, 200, "info", text, keep=True, values=values, finding=record)
    if found.verdict == "not_executed":
        text = f"{label[:1].upper()}{label[1:]} has no record of this call: it was not executed."
        values = {"executed": "no", "note": f"not in {label} by its key"}
        return _reply(request, entry, 200, "info", text, keep=True, values=values)
    return _reply(
        request, entry, 200, "warning", f"{found.problem} Decide from what you can check.", keep=True
    )


RESULT_MAX = 16_384


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


def _reply(
    request: HttpRequest,
    entry: InboxEntry,
    status: int,
    level: Level,
    text: str,
    *,
    keep: bool = False,
    values: dict[str, str] | None = None,
    finding: str = "",
) -> HttpResponse:
    """htmx: the item (or nothing, removing it) plus a flash; otherwise a redirect back.

    ``values`` are what the person typed: a kept form shows them again, not the proposal.
    """
    if values and entry.fields:
        typed = tuple(replace(f, value=values.get(f.input_name, f.value)) for f in entry.fields)
        entry = replace(entry, fields=typed)
    if request.headers.get("HX-Request") == "true":
        error = text if status == 400 else ""
        item = (
            render_entry(entry, request=request, error=error, values=values, finding=finding) if keep else ""
        )
        flash = render_to_string("console/_flash.html", {"level": level, "text": text})
        response = HttpResponse(item + flash, status=status)
        response.headers["HX-Reswap"] = "outerHTML"
        return response
    getattr(messages, level)(request, text)
    return HttpResponseRedirect(_back(request), status=303)
