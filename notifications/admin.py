"""Admin for notifications. Webhooks: endpoints (the secret shown once, when added), deliveries read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from notifications.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from notifications.webhooks.events import EVENT_TYPES
from notifications.webhooks.selectors import display_url
from notifications.webhooks.services import webhook_endpoint_register, webhook_events_clean
from notifications.webhooks.targets import check_url
from sitekit.errors import WebhookUrlRefusedError

# -- webhooks ---------------------------------------------------------------------------


class WebhookEndpointForm(forms.ModelForm):
    """The URL passes the SSRF guard; events are chosen from the known types (none: all)."""

    url = forms.URLField(max_length=2000, assume_scheme="https")
    events = forms.MultipleChoiceField(
        choices=[(name, name) for name in EVENT_TYPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None chosen: every event.",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ("tenant", "url", "events", "include_arguments", "enabled", "description")

    def clean_url(self) -> str:
        url = str(self.cleaned_data["url"]).strip()
        try:
            check_url(url)
        except WebhookUrlRefusedError as exc:
            raise forms.ValidationError(exc.detail or exc.message) from exc
        return url

    def clean_events(self) -> list[str]:
        return webhook_events_clean(self.cleaned_data.get("events") or [])


class WebhookAttemptInline(admin.TabularInline):
    model = WebhookAttempt
    extra = 0
    can_delete = False
    fields = ("number", "started_at", "finished_at", "status_code", "error", "duration_ms")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = WebhookEndpointForm
    list_display = ("id", "tenant", "receiver", "enabled", "include_arguments", "created_at")
    list_filter = ("tenant", "enabled")
    search_fields = ("url", "description", "tenant__slug")

    @admin.display(description="URL")
    def receiver(self, obj: WebhookEndpoint) -> str:
        """The URL without its query: a receiver's token there is not listed."""
        return display_url(obj.url)

    def get_readonly_fields(self, request: HttpRequest, obj: WebhookEndpoint | None = None) -> list[str]:
        # A receiver belongs to its tenant for good: another tenant registers its own.
        return [] if obj is None else ["tenant", "created_at"]

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["url", "events", "include_arguments", "enabled", "description"])
            return
        endpoint, secret = webhook_endpoint_register(
            tenant=obj.tenant,
            url=obj.url,
            actor=request.user.get_username(),
            events=obj.events or [],
            include_arguments=obj.include_arguments,
            description=obj.description,
        )
        obj.pk, obj.secret, obj.created_at = endpoint.pk, endpoint.secret, endpoint.created_at
        obj._state.adding = False
        if not obj.enabled:
            WebhookEndpoint.objects.filter(pk=endpoint.pk).update(enabled=False)
        messages.warning(request, f"The new endpoint's signing secret, shown only this once: {secret}")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """What was sent where, and how each attempt went: for looking, not for changing."""

    list_display = (
        "webhook_id",
        "event_type",
        "endpoint",
        "status",
        "attempts",
        "last_status_code",
        "created_at",
    )
    list_filter = ("status", "event_type", "tenant_id")
    search_fields = ("webhook_id", "tenant_id")
    inlines = (WebhookAttemptInline,)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
