"""The audit page: a tenant's chain, newest first, paged by sequence number, and Verify."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from audit.presentation import audit_rows
from audit.selectors import audit_events, audit_heads, audit_verify
from audit.store import event_from_row
from sitekit.pages import console_page
from tenants.access import require_role
from tenants.models import Role
from tenants.selectors import tenant_ids

PAGE_SIZE = 50


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
    """``PAGE_SIZE`` events ending before ``?before=`` (default: the newest), newest first."""
    require_role(request.user, tenant_id, Role.VIEWER)
    head = audit_heads([tenant_id])[tenant_id]
    try:
        before = int(request.GET.get("before", head + 1))
    except ValueError:
        before = head + 1
    before = max(1, min(before, head + 1))
    page = audit_events(tenant_id=tenant_id, after=before, newest_first=True, limit=PAGE_SIZE)
    events = [event_from_row(row) for row in page.rows]
    # Rows, not events: the template reads no body field, so no kind's body can break it.
    return render(
        request,
        "audit/chain.html",
        {
            "tenant_id": tenant_id,
            "tenants": tenant_ids(request),
            "head": head,
            "events": audit_rows(tenant_id, events),
            "newer": before + PAGE_SIZE if before <= head else None,
            "older": page.next_key[0] if page.next_key else None,
            "at_newest": before > head,
        },
    )


@require_POST
@console_page
def audit_verify_view(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """Verify the whole chain; report intact, or the first broken event with a link to it."""
    require_role(request.user, tenant_id, Role.VIEWER)
    report = audit_verify(tenant_id=tenant_id)
    url = reverse("audit-chain", args=[tenant_id])
    if report.ok:
        messages.success(
            request, f"Chain of {tenant_id} is intact: {report.checked} events, head seq {report.head_seq}."
        )
        return HttpResponseRedirect(url, status=303)
    bad = report.first_bad_seq or 0
    messages.error(
        request,
        f"Chain of {tenant_id} is BROKEN at seq {bad} ({report.reason}); "
        f"verified up to seq {report.head_seq}.",
    )
    return HttpResponseRedirect(f"{url}?before={bad + 1}#ev-{bad}", status=303)
