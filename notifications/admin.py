"""Admin for notifications. Webhooks: endpoints (a secret shown once, when added or rotated), deliveries.
Slack: workspaces (saved through their audited service), links, posts and clicks (read only).

Every change goes through :mod:`notifications.webhooks.services`, as the console's and
the command's do, so each is audited under the admin's name.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from keelgate.errors import KeelgateError
from notifications.models import (
    SlackDelivery,
    SlackInteraction,
    SlackLink,
    SlackWorkspace,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from notifications.slack.workspaces import workspace_problem, workspace_register
from notifications.webhooks.events import EVENT_TYPES
from notifications.webhooks.selectors import display_url
from notifications.webhooks.services import (
    webhook_delivery_redeliver,
    webhook_endpoint_delete,
    webhook_endpoint_enable,
    webhook_endpoint_register,
    webhook_endpoint_update,
    webhook_events_clean,
    webhook_secret_rotate,
    webhook_test_send,
)
from notifications.webhooks.targets import check_url
from sitekit.admin import ReadOnlyAdmin
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
    fields = ("number", "started_at", "finished_at", "status_code", "error", "duration_ms", "response")
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
        actor = request.user.get_username()
        if change:
            current = WebhookEndpoint.objects.select_related("tenant").get(pk=obj.pk)
            current = webhook_endpoint_update(
                endpoint=current,
                actor=actor,
                url=obj.url,
                events=obj.events or [],
                include_arguments=obj.include_arguments,
                description=obj.description,
            )
            webhook_endpoint_enable(endpoint=current, actor=actor, enabled=obj.enabled)
            return
        endpoint, secret = webhook_endpoint_register(
            tenant=obj.tenant,
            url=obj.url,
            actor=actor,
            events=obj.events or [],
            include_arguments=obj.include_arguments,
            description=obj.description,
            enabled=obj.enabled,
        )
        obj.pk, obj.secret, obj.created_at = endpoint.pk, endpoint.secret, endpoint.created_at
        obj._state.adding = False
        messages.warning(request, f"The new endpoint's signing secret, shown only this once: {secret}")

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # Its deliveries go with the endpoint (the service deletes them): that nobody may
        # delete one on its own must not keep the endpoint from being deleted.
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_model(self, request: HttpRequest, obj: WebhookEndpoint) -> None:
        webhook_endpoint_delete(endpoint=obj, actor=request.user.get_username())

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset.select_related("tenant"):
            webhook_endpoint_delete(endpoint=endpoint, actor=request.user.get_username())

    @admin.action(description="Rotate the signing secret (the old one signs on for the grace period)")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset.select_related("tenant"):
            endpoint, secret = webhook_secret_rotate(endpoint=endpoint, actor=request.user.get_username())
            messages.warning(
                request, f"Webhook {endpoint.pk}'s new signing secret, shown only this once: {secret}"
            )

    @admin.action(description="Send a test message")
    def send_test(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset.select_related("tenant"):
            delivery = webhook_test_send(endpoint=endpoint, actor=request.user.get_username())
            messages.info(request, f"Test message {delivery.webhook_id} queued for webhook {endpoint.pk}.")

    actions = ("rotate_secret", "send_test")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
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
    actions = ("redeliver",)

    @admin.action(description="Send again (finished messages, same id and body)")
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        for delivery in queryset.select_related("endpoint__tenant"):
            try:
                webhook_delivery_redeliver(delivery=delivery, actor=request.user.get_username())
            except KeelgateError as exc:
                messages.error(request, f"{delivery.webhook_id}: {exc.message}")
            else:
                messages.info(request, f"{delivery.webhook_id} queued again.")


# -- Slack ------------------------------------------------------------------------------


class SlackWorkspaceForm(forms.ModelForm):
    """The ids and variable names checked as the command checks them; saved through its service."""

    class Meta:
        model = SlackWorkspace
        fields = ("tenant", "team_id", "token_env", "secret_env", "channel", "agent_channels")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        agents = data.get("agent_channels") or {}
        if not isinstance(agents, dict) or not all(isinstance(v, str) for v in agents.values()):
            self.add_error("agent_channels", 'An object of agent to channel id: {"paper-trader": "C0123"}.')
            return data
        problem = workspace_problem(
            team_id=data.get("team_id", ""),
            token_env=data.get("token_env", ""),
            secret_env=data.get("secret_env", ""),
            channel=data.get("channel", ""),
            agent_channels=agents,
        )
        if problem:
            raise forms.ValidationError(problem)
        return data


@admin.register(SlackWorkspace)
class SlackWorkspaceAdmin(admin.ModelAdmin):
    """Workspaces: registered and changed through ``workspace_register``, so each change is audited.

    Only the names of the variables holding the token and the signing secret are here.
    """

    form = SlackWorkspaceForm
    list_display = ("team_id", "tenant", "channel", "token_env", "secret_env", "enabled")
    list_filter = ("tenant",)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        data = form.cleaned_data
        try:
            saved, _ = workspace_register(
                tenant=data["tenant"],
                team_id=data["team_id"],
                token_env=data["token_env"],
                secret_env=data["secret_env"],
                channel=data["channel"],
                agent_channels=data.get("agent_channels") or {},
                actor=request.user.get_username(),
            )
        except ValueError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)
            return
        obj.pk = saved.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


@admin.register(SlackLink)
class SlackLinkAdmin(admin.ModelAdmin):
    """Who each Slack user acts as; made by the person's code or ``keelgate_slack link`` (audited)."""

    list_display = ("workspace", "slack_user", "user", "linked_by", "created_at")
    list_filter = ("workspace",)
    readonly_fields = ("workspace", "slack_user", "user", "linked_by", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(SlackDelivery)
class SlackDeliveryAdmin(ReadOnlyAdmin):
    """Posts and updates, read only."""

    list_display = ("item", "update", "event_kind", "status", "attempts", "last_error", "created_at")
    list_filter = ("status", "update")


@admin.register(SlackInteraction)
class SlackInteractionAdmin(ReadOnlyAdmin):
    """Clicks: what each asked and how it ended, read only."""

    list_display = ("slack_user", "action", "approval_id", "status", "reason", "decided_as", "received_at")
    list_filter = ("action", "status", "reason")
