"""Admin for tenants, memberships and API keys (a new key's secret is shown once, as a message).

Memberships and keys change through the same services as the console and the commands
(:mod:`tenants.services`, :mod:`tenants.api_keys`), so each change is an audit event by
the admin's username; deleting a membership here deactivates it. A tenant's page lists
its members read-only: change them on the Memberships page (or the console's People page).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from keelgate.errors import KeelgateError
from tenants.api_keys import api_key_create, api_key_revoke
from tenants.models import ApiKey, Membership, Tenant
from tenants.services import member_add, member_deactivate, member_set_role


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fields = ("user", "role")
    readonly_fields = ("user", "role")
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = (MembershipInline,)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "deactivated_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__slug")
    autocomplete_fields = ("user", "tenant")
    readonly_fields = ("deactivated_at",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Membership]:
        return Membership.all_objects.select_related("user", "tenant")

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> list[str]:
        # A membership is of one person in one tenant: only its role changes.
        return ["deactivated_at"] if obj is None else ["user", "tenant", "deactivated_at"]

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        by = request.user.get_username()
        try:
            if change:
                member_set_role(tenant=obj.tenant, user=obj.user, role=obj.role, by=by)
            else:
                saved, _ = member_add(
                    tenant=obj.tenant, username=obj.user.get_username(), role=obj.role, by=by
                )
                obj.pk = saved.pk
                obj._state.adding = False
        except KeelgateError as exc:
            messages.error(request, exc.message)

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        try:
            member_deactivate(tenant=obj.tenant, user=obj.user, by=request.user.get_username())
        except KeelgateError as exc:
            messages.error(request, exc.message)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        for membership in queryset.filter(deactivated_at__isnull=True):
            self.delete_model(request, membership)


class ApiKeyCreateForm(forms.ModelForm):
    """Only tenant, user and name are chosen; the secret is generated."""

    class Meta:
        model = ApiKey
        fields = ("tenant", "user", "name")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        tenant, user = data.get("tenant"), data.get("user")
        if tenant and user and not Membership.objects.filter(tenant=tenant, user=user).exists():
            raise forms.ValidationError("The user does not belong to that tenant.")
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "tenant", "user", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    search_fields = ("prefix", "name", "user__username", "tenant__slug")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def get_form(
        self, request: HttpRequest, obj: ApiKey | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = ApiKeyCreateForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        if obj is None:
            return ["tenant", "user", "name"]
        return ["tenant", "user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return []
        # The tenant and user of a key never change: a new person needs a new key.
        return ["tenant", "user", "prefix", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["name"])
            return
        key, secret = api_key_create(
            tenant=obj.tenant, user=obj.user, name=obj.name, by=request.user.get_username()
        )
        obj.pk, obj.prefix, obj.hashed, obj.created_at = key.pk, key.prefix, key.hashed, key.created_at
        obj._state.adding = False
        messages.warning(request, f"The new API key, shown only this once: {secret}")

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key in queryset:
            api_key_revoke(key=key, by=request.user.get_username())
        messages.success(request, f"Revoked {queryset.count()} key(s).")
