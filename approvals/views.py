"""The inbox and the decisions taken from it: approve, deny, reconcile.

Views parse the form, call one service and render what happened; every write goes
through ``approvals.services``. A decision form works with and without JavaScript:
htmx posts it and swaps the item in place (a settled item disappears, a flash says
what happened), a plain post redirects back with the same flash.

Forms are read by :mod:`approvals.forms`; the cards and sections are
:mod:`approvals.cards`, which the websocket consumer renders too. Every error a service
raises reaches one handler, ``_refused`` on a card (``flash_refusal`` on the run page
after cancel), which says it in the words of :mod:`sitekit.console_errors`: no view
keeps wording of its own for an error.
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
from approvals.forms import NOTE_MAX, DecisionForm, ReconcileForm, StandingForm, note_problem
from approvals.models import Approval, StandingApproval, UnknownOutcome
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
from approvals.standing import (
    max_days,
    standing_create_from,
    standing_edit,
    standing_endorse,
    standing_revoke,
    standing_rules,
)
from audit.selectors import audit_heads
from keelgate.errors import KeelgateError, error_from_code
from sitekit.console_errors import Level, refusal_line, refusal_or_raise
from sitekit.errors import NotFoundError
from sitekit.pages import console_page, flash_refusal
from tenants.auditing import decision_context
from tenants.models import Role
from tenants.selectors import memberships, tenant_ids


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
            # A viewer decides nothing: no bulk bar (each card already hides its own buttons).
            "can_decide": any(m.allows(Role.APPROVER) for m in by_tenant.values()),
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
    if note_problem(note):
        return _bulk_reply(request, [], "error", note_problem(note), status=400)
    try:
        results = approvals_decide_bulk(
            tenant_ids=tenant_ids(request),
            choices=choices,
            user=request.user,
            decision="approve" if decision == "approve" else "deny",
            note=note,
            context=decision_context(request),
        )
    except KeelgateError as exc:  # refused as a whole (a deny without a reason)
        told = refusal_or_raise(exc)
        return _bulk_reply(request, [], told.level, told.text, status=told.status)
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


def _bulk_lines(results: list[BulkResult]) -> list[str]:
    lines = []
    for r in results:
        what = f"{r.tool} in run {r.run_id}" if r.tool else f"approval {r.approval_id}"
        if r.status == "refused":
            lines.append(f"{what}: {refusal_line(error_from_code(r.code, r.detail))}")
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
    """Approve one pending approval (optional note), as proposed or edited."""
    return _decide(request, pk, "approve")


@require_POST
@console_page
def deny(request: HttpRequest, pk: int) -> HttpResponse:
    """Deny one pending approval (a reason is required: the planner reads it)."""
    return _decide(request, pk, "deny")


def _decide(request: HttpRequest, pk: int, decision: Literal["approve", "deny"]) -> HttpResponse:
    row = approval_get(tenant_ids=tenant_ids(request), approval_id=pk)
    role = memberships(request)[row.tenant_id].role
    entry = approval_entry(row, role=role, username=request.user.get_username())
    form = DecisionForm.read(request.POST, decision=decision, fields=entry.fields)
    if form.problem:
        return _reply(request, entry, 400, "error", form.problem, keep=True, values=form.typed)
    standing = StandingForm.read(request.POST, row) if decision == "approve" and not form.arguments else None
    if standing is not None and standing.problem:
        return _reply(request, entry, 400, "error", standing.problem, keep=True, values=form.typed)
    try:
        if standing is not None:  # refused before the approval is recorded, not after
            _make_standing(standing, request.user, row, check_only=True)
        decided = approval_decide(
            tenant_id=row.tenant_id,
            approval_id=row.pk,
            user=request.user,
            decision=decision,
            note=form.note,
            arguments=form.arguments,
            seen=form.seen,
            confirmed=form.confirmed,
            context=decision_context(request),
        )
    except KeelgateError as exc:
        return _refused(request, entry, exc, typed=form.typed)
    text = _decided_text(row, decided, decision)
    if standing is not None:
        try:
            made = _make_standing(standing, request.user, row, check_only=False)
        except KeelgateError as exc:  # e.g. the role changed in between: the approval stands
            text += f" No standing rule was made: {exc.message} {exc.detail or ''}".rstrip()
        else:
            text += " " + _standing_text(made)
    if decided.status == "pending":  # M-of-N: the card stays for the next approver
        kept = approval_entry(decided, role=role, username=request.user.get_username())
        return _reply(request, kept, 200, "info", text, keep=True)
    return _reply(request, entry, 200, "success", text)


def _make_standing(
    form: StandingForm, user: Any, row: Approval, *, check_only: bool
) -> StandingApproval | None:
    return standing_create_from(
        tenant_id=row.tenant_id,
        approval=row,
        user=user,
        bounds=form.bounds,
        exact=form.exact,
        expires_at=form.expires_at(),
        note=f"made while approving {row.tool} in run {row.run_id}",
        expiry_field="standing_days",
        check_only=check_only,
    )


def _standing_text(rule: StandingApproval | None) -> str:
    if rule is None:
        return ""
    until = timezone.localtime(rule.expires_at).strftime("%Y-%m-%d %H:%M")
    if len(rule.maker_names) < rule.required:
        more = rule.required - len(rule.maker_names)
        return (
            f"Standing rule #{rule.pk} is made: it approves the same calls once {more} more "
            f"{'person endorses' if more == 1 else 'people endorse'} it (Standing approvals), until {until}."
        )
    return f"From now on, standing rule #{rule.pk} approves the same calls, until {until}."


def _decided_text(row: Approval, decided: Approval, decision: Literal["approve", "deny"]) -> str:
    """What a decision did; ``decided`` is another row than ``row`` when an edit replaced the call."""
    edited = decided.pk != row.pk
    if decided.status == "pending":
        left = decided.remaining
        more = f"{left} more approver{'s' if left != 1 else ''} needed"
        if edited:
            return f"Your edit is recorded and approved by you: {more} for it."
        return f"Your approval is recorded: {more}."
    if edited:
        return f"Approved {row.tool} in run {row.run_id} with your edit: the original will not run."
    verb = "Approved" if decision == "approve" else "Denied"
    return f"{verb} {row.tool} in run {row.run_id}: the run is queued."


@require_POST
@console_page
def run_cancel_view(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """Cancel a run from its page (an approver); back to the page with what happened."""
    back = reverse("run", args=[tenant_id, run_id])
    note = request.POST.get("note", "")[:NOTE_MAX]
    if request.POST.get("confirm") != "yes":  # it cannot be undone: the box says so
        messages.warning(request, "Nothing was cancelled: tick the box to confirm that it cannot be undone.")
        return HttpResponseRedirect(back, status=303)
    try:
        run = run_cancel(
            tenant_id=tenant_id,
            run_id=run_id,
            user=request.user,
            note=note,
            context=decision_context(request),
        )
    except KeelgateError as exc:
        flash_refusal(request, exc)
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
    form = ReconcileForm.read(request.POST)
    if form.problem:
        return _reply(request, entry, 400, "error", form.problem, keep=True, values=form.typed)
    try:
        unknown_reconcile(
            tenant_id=row.tenant_id,
            item_id=row.pk,
            user=request.user,
            executed=form.executed,
            note=form.note,
            result=form.result,
            context=decision_context(request),
        )
    except KeelgateError as exc:
        return _refused(request, entry, exc, typed=form.typed)
    verdict = "executed" if form.executed else "not executed"
    recorded = " with the result you found" if form.result is not None else ""
    text = f"Recorded {row.tool} in run {row.run_id} as {verdict}{recorded}."
    return _reply(request, entry, 200, "success", text)


@require_POST
@console_page
def check(request: HttpRequest, pk: int) -> HttpResponse:
    """Ask the system of record about an unknown outcome and pre-fill the form with its answer."""
    row, entry = _unknown_card(request, pk)
    try:
        found = unknown_check(tenant_id=row.tenant_id, item_id=row.pk, user=request.user)
    except KeelgateError as exc:
        return _refused(request, entry, exc, typed={})
    label = entry.lookup or "the system of record"
    if found.verdict == "executed":
        record = json.dumps(found.record, sort_keys=True)
        text = f"{label[:1].upper()}{label[1:]} has this call: it was executed. Check it, then record it."
        values = {"executed": "yes", "result": record}  # the note is the person's to write
        return _reply(request, entry, 200, "info", text, keep=True, values=values, finding=record)
    if found.verdict == "not_executed":
        text = f"{label[:1].upper()}{label[1:]} has no record of this call: it was not executed."
        values = {"executed": "no"}
        return _reply(request, entry, 200, "info", text, keep=True, values=values)
    return _reply(
        request, entry, 200, "warning", f"{found.problem} Decide from what you can check.", keep=True
    )


# -- the console's one answer to an error ----------------------------------------------


def _refused(
    request: HttpRequest, entry: InboxEntry, exc: KeelgateError, *, typed: dict[str, str]
) -> HttpResponse:
    """A decision the service refused, on its card: the error's console wording and status.

    When someone or something else settled the item while the person typed (another
    decision, the deadline), the card stays on screen with what they typed, so their
    words are not lost; only htmx can show them again (a plain post is redirected).
    """
    told = refusal_or_raise(exc)
    text, keep = told.text, told.keep
    if told.keep_typed and any(v.strip() for v in typed.values()) and _htmx(request):
        text, keep = f"{text} Nothing of yours was applied; what you typed is below.", True
    return _reply(request, entry, told.status, told.level, text, keep=keep, values=typed if keep else None)


def _htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


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
    An error shown on the kept card is not flashed as well: it is said once, where it is.
    """
    if values and entry.fields:
        typed = tuple(replace(f, value=values.get(f.input_name, f.value)) for f in entry.fields)
        entry = replace(entry, fields=typed)
    if _htmx(request):
        error = text if status == 400 else ""
        item = (
            render_entry(entry, request=request, error=error, values=values, finding=finding) if keep else ""
        )
        on_card = bool(error) and keep
        flash = "" if on_card else render_to_string("console/_flash.html", {"level": level, "text": text})
        response = HttpResponse(item + flash, status=status)
        response.headers["HX-Reswap"] = "outerHTML"
        return response
    getattr(messages, level)(request, text)
    return HttpResponseRedirect(_back(request), status=303)


# -- standing approval rules ----------------------------------------------------------------


@require_GET
@console_page
def standing_page(request: HttpRequest) -> HttpResponse:
    """The standing rules of the user's tenants: admins narrow and revoke, approvers endorse."""
    by_tenant = memberships(request)
    now = timezone.now()
    rules = [
        {
            "rule": rule,
            "live": rule.live_at(now),
            "ended": rule.revoked_at is not None or rule.expires_at <= now,
            "admin": by_tenant[rule.tenant_id].allows(Role.ADMIN),
            "may_endorse": by_tenant[rule.tenant_id].allows(Role.APPROVER)
            and request.user.get_username() not in rule.maker_names
            and len(rule.maker_names) < rule.required,
        }
        for rule in standing_rules(tenant_ids=list(by_tenant))
    ]
    return render(request, "approvals/standing.html", {"rules": rules, "max_days": max_days()})


def _standing_back(request: HttpRequest, text: str, level: Level = "success") -> HttpResponse:
    getattr(messages, level)(request, text)
    return HttpResponseRedirect(reverse("standing"), status=303)


def _rule_tenant(request: HttpRequest, pk: int) -> str:
    """The tenant of a rule the user may see (NotFoundError otherwise)."""
    found = StandingApproval.objects.filter(tenant_id__in=tenant_ids(request), pk=pk).values_list(
        "tenant_id", flat=True
    )
    if not found:
        raise NotFoundError()
    return str(found[0])


@require_POST
@console_page
def standing_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke a rule (admins): it approves nothing from this commit on."""
    tenant_id = _rule_tenant(request, pk)
    try:
        standing_revoke(
            tenant_id=tenant_id, rule_id=pk, user=request.user, note=request.POST.get("note", "")[:NOTE_MAX]
        )
    except KeelgateError as exc:
        flash_refusal(request, exc)
        return HttpResponseRedirect(reverse("standing"), status=303)
    return _standing_back(request, f"Standing rule #{pk} revoked: it approves nothing from now on.")


@require_POST
@console_page
def standing_endorse_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Become one more maker of a rule that needs several."""
    tenant_id = _rule_tenant(request, pk)
    try:
        rule = standing_endorse(tenant_id=tenant_id, rule_id=pk, user=request.user)
    except KeelgateError as exc:
        flash_refusal(request, exc)
        return HttpResponseRedirect(reverse("standing"), status=303)
    live = len(rule.maker_names) >= rule.required
    return _standing_back(request, f"You endorsed standing rule #{pk}{': it is live now' if live else ''}.")


@require_POST
@console_page
def standing_edit_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Narrow a rule (admins): an earlier expiry, a lower max or a higher min."""
    tenant_id = _rule_tenant(request, pk)
    rule = StandingApproval.objects.get(pk=pk)
    edit = StandingForm.read_edit(request.POST, rule)
    if edit.problem:
        return _standing_back(request, edit.problem, "error")
    try:
        standing_edit(
            tenant_id=tenant_id, rule_id=pk, user=request.user, expires_at=edit.expires_at, bounds=edit.bounds
        )
    except KeelgateError as exc:
        flash_refusal(request, exc)
        return HttpResponseRedirect(reverse("standing"), status=303)
    return _standing_back(request, f"Standing rule #{pk} narrowed.")
