"""The audit pages: a tenant's log under filters kept in the URL, its Decisions view, one
event's page, the signed checkpoints, and Verify.

The list pages read their query string with :class:`audit.review.ReviewQuery` (the API's
filters, :class:`audit.schemas.AuditFiltersIn`); a value it refuses is a 400 page that
says which field is wrong and lists nothing. The newest page of a list takes new events
live: its table is a ``data-live-refresh`` fragment that the inbox's websocket refreshes
when the tenant's log grows (``kg-changed``'s ``data-tenants``), re-read under the same
filters, so only matching events arrive.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from audit.checkpoints import latest_checkpoint
from audit.exports import export_bundle
from audit.kinds import EVENT_KINDS
from audit.proofs import check_event
from audit.retired import first_kept
from audit.review import ReviewQuery, checkpoint_entries, decision_entries, event_entries
from audit.selectors import (
    audit_checkpoints,
    audit_event,
    audit_head,
    audit_heads,
    audit_retirement,
    audit_verify,
    audit_window,
)
from sitekit.api import MAX_ID
from sitekit.errors import AuditRetiredError, InvalidCursorError, NotFoundError
from sitekit.pages import console_page
from tenants.access import require_role
from tenants.models import Role
from tenants.selectors import allows, tenant_ids

PAGE_SIZE = 50
CHECKPOINT_PAGE_SIZE = 50


def _require_member(request: HttpRequest, tenant_id: str) -> None:
    """Any member may read the tenant's log; to anyone else it does not exist (404).

    The memberships the page reads anyway (the tenants' links, Export), so no query of its own.
    """
    if not allows(request, tenant_id, Role.VIEWER):
        raise NotFoundError()


@require_GET
@console_page
def audit_index(request: HttpRequest) -> HttpResponse:
    """The user's tenants with their chain heads; straight to the chain if there is one."""
    ids = tenant_ids(request)
    if len(ids) == 1:
        return HttpResponseRedirect(reverse("audit-chain", args=[ids[0]]))
    return render(request, "audit/index.html", {"heads": sorted(audit_heads(ids).items())})


@require_GET
@console_page
def audit_chain(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """The tenant's events under the URL's filters, ``PAGE_SIZE`` a page, newest first."""
    return _list_page(request, tenant_id, decisions=False, fragment=False)


@require_GET
@console_page
def audit_rows(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """The events table alone: the live tail re-reads it when the tenant's log grows."""
    return _list_page(request, tenant_id, decisions=False, fragment=True)


@require_GET
@console_page
def audit_decisions(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """Every decision (approve, deny, edit, reconcile, escalate, expire, cancel), newest first:
    who, when, what and the note, under the same filters as the events."""
    return _list_page(request, tenant_id, decisions=True, fragment=False)


@require_GET
@console_page
def audit_decision_rows(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """The decisions table alone, for the live tail."""
    return _list_page(request, tenant_id, decisions=True, fragment=True)


def _list_page(request: HttpRequest, tenant_id: str, *, decisions: bool, fragment: bool) -> HttpResponse:
    _require_member(request, tenant_id)
    # The head before the page is read: the live socket catches up from here.
    head, kept = audit_head(tenant_id=tenant_id)
    query = ReviewQuery.read(request.GET)
    window = None
    if query.filters is not None:
        filters = query.filters.listing_values()
        if decisions:
            filters["decisions"] = True
        window = audit_window(
            tenant_id=tenant_id,
            filters=filters,
            before_seq=query.before,
            after_seq=query.after,
            limit=PAGE_SIZE,
        )
    rows = window.rows if window else []
    here = "audit-decisions" if decisions else "audit-chain"
    context: dict[str, Any] = {
        "tenant_id": tenant_id,
        "tenants": tenant_ids(request),
        "head": head,
        "since_json": json.dumps({tenant_id: head}),
        "query": query,
        "decisions": decisions,
        "here": here,
        "page_url": reverse(here, args=[tenant_id]),
        "rows_url": reverse("audit-decision-rows" if decisions else "audit-rows", args=[tenant_id]),
        "filters_query": query.query(),
        "live": window is not None and query.at_newest,
        "entries": (decision_entries if decisions else event_entries)(tenant_id, rows),
        "newer_query": query.query(after=window.newer) if window and window.newer is not None else None,
        "older_query": query.query(before=window.older) if window and window.older is not None else None,
        "kinds": list(EVENT_KINDS),
        "first_kept": kept,
        "export_url": reverse("audit-export", args=[tenant_id])
        if allows(request, tenant_id, Role.ADMIN)
        else "",
    }
    status = 400 if query.errors else 200
    template = "audit/_decisions.html" if decisions else "audit/_events.html"
    return render(request, template if fragment else "audit/chain.html", context, status=status)


@require_GET
@console_page
def audit_event_view(request: HttpRequest, tenant_id: str, seq: int) -> HttpResponse:
    """One sequenced event: its words, body (untrusted, escaped), hashes, and the proof block."""
    _require_member(request, tenant_id)
    try:
        row = audit_event(tenant_id=tenant_id, seq=seq)
    except AuditRetiredError as exc:
        return _retired_page(request, tenant_id, seq, exc.first_kept)
    (entry,) = event_entries(tenant_id, [row])
    checkpoint = latest_checkpoint(tenant_id)
    return render(
        request,
        "audit/event.html",
        {
            "tenant_id": tenant_id,
            "event": entry,
            "checkpoint": checkpoint_entries([checkpoint])[0] if checkpoint else None,
            "covered": checkpoint is not None and checkpoint.size >= seq,
            "proof": check_event(tenant_id, seq),
            "trail_query": urlencode({"run": entry.row.run_id}) if entry.row.run_id else "",
        },
    )


def _retired_page(request: HttpRequest, tenant_id: str, seq: int, first_kept: int) -> HttpResponse:
    """A retired event's page (410): that it was retired, by which retirement, and where it is now."""
    retirement = audit_retirement(tenant_id=tenant_id, seq=seq)
    entry = event_entries(tenant_id, [retirement])[0] if retirement is not None else None
    context = {"tenant_id": tenant_id, "seq": seq, "first_kept": first_kept, "retirement": entry}
    return render(request, "audit/retired.html", context, status=410)


@require_GET
@console_page
def audit_checkpoints_view(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """The tenant's signed checkpoints, newest first, paged by size (``?before=<size>``)."""
    _require_member(request, tenant_id)
    text = (request.GET.get("before") or "").strip()
    before = int(text) if text.isdigit() and 0 < int(text) <= MAX_ID else None
    if text and before is None:
        raise InvalidCursorError()  # a hand-edited link: console_page's 400 page says so
    page = audit_checkpoints(tenant_id=tenant_id, before=before, limit=CHECKPOINT_PAGE_SIZE)
    return render(
        request,
        "audit/checkpoints.html",
        {
            "tenant_id": tenant_id,
            "checkpoints": checkpoint_entries(page.rows),
            "older": page.next_key[0] if page.next_key else None,
            "paged": before is not None,
        },
    )


@require_POST
@console_page
def audit_verify_view(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """Verify the whole chain; report intact, or the first broken event with a link to it."""
    require_role(request.user, tenant_id, Role.VIEWER)
    report = audit_verify(tenant_id=tenant_id)
    kept = first_kept(tenant_id)
    url = reverse("audit-chain", args=[tenant_id])
    if report.ok:
        retired = f" (events below {kept} retired: checked from the tree's kept hashes)" if kept > 1 else ""
        messages.success(
            request,
            f"Chain of {tenant_id} is intact: {report.checked} events, head seq {report.head_seq}{retired}.",
        )
        return HttpResponseRedirect(url, status=303)
    bad = report.first_bad_seq or 0
    messages.error(
        request,
        f"Chain of {tenant_id} is BROKEN at seq {bad} ({report.reason}); "
        f"verified up to seq {report.head_seq}.",
    )
    return HttpResponseRedirect(f"{url}?before={bad + 1}#ev-{bad}", status=303)


@require_GET
@console_page
def audit_export_view(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """Admins: the whole log as a bundle to verify offline (``python -m keelgate.audit.verify``),
    under the newest checkpoint, as a download."""
    require_role(request.user, tenant_id, Role.ADMIN)
    bundle = export_bundle(tenant_id)
    response = HttpResponse(json.dumps(bundle, ensure_ascii=False), content_type="application/json")
    name = f"keelgate-audit-{tenant_id}-{bundle['from_seq']}-{bundle['to_seq']}.json"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
