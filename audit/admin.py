"""A read-only window on the audit chain, with a button to verify it.

The chain is append-only: the admin may look, never add, edit or delete, because any
change through it would break the chain (and erase the evidence it exists for).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.models import AuditEvent, WitnessState
from audit.selectors import audit_verify
from sitekit.admin import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Events listed and filtered by tenant and kind; no write permission for anyone."""

    list_display = ("tenant_id", "seq", "at", "actor", "kind")
    list_filter = ("tenant_id", "kind")
    readonly_fields = ("tenant_id", "seq", "at", "actor", "kind", "body", "prev_hash", "hash")
    # Counting a table of millions of rows on every page load is the slow part.
    show_full_result_count = False
    actions = ("verify_chains",)

    @admin.action(description="Verify chain of the selected events' tenants")
    def verify_chains(self, request: HttpRequest, queryset: QuerySet[AuditEvent]) -> None:
        """Verify each selected tenant's whole chain, not just the selected rows."""
        # order_by(): Meta.ordering would add seq to the DISTINCT.
        tenants = sorted(set(queryset.order_by().values_list("tenant_id", flat=True).distinct()))
        for tenant_id in tenants:
            report = audit_verify(tenant_id=tenant_id)
            if report.ok:
                self.message_user(
                    request,
                    f"tenant={tenant_id} intact: {report.checked} events, head seq {report.head_seq}",
                    messages.SUCCESS,
                )
            else:
                self.message_user(
                    request,
                    f"tenant={tenant_id} BROKEN at seq={report.first_bad_seq} reason={report.reason}",
                    messages.ERROR,
                )


@admin.register(WitnessState)
class WitnessStateAdmin(ReadOnlyAdmin):
    """How each witness is doing with each tenant's log (``audit.witnesses``): read only, as
    the sequencer's witness thread is its one writer."""

    list_display = ("tenant_id", "witness", "size", "cosigned_at", "failures", "last_status", "due_at")
    list_filter = ("witness",)
    readonly_fields = (
        "tenant_id",
        "witness",
        "key_id",
        "size",
        "cosigned_at",
        "failures",
        "last_attempt_at",
        "last_status",
        "last_error",
        "due_at",
        "claimed_until",
    )
