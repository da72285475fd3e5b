"""Admin for tenants, memberships and API keys (a new key's secret is shown once, as a message)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tenants.api_keys import api_key_create, api_key_revoke
from tenants.models import ApiKey, Membership, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = (MembershipInline,)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__slug")
    autocomplete_fields = ("user", "tenant")


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
        key, secret = api_key_create(tenant=obj.tenant, user=obj.user, name=obj.name)
        obj.pk, obj.prefix, obj.hashed, obj.created_at = key.pk, key.prefix, key.hashed, key.created_at
        obj._state.adding = False
        messages.warning(request, f"The new API key, shown only this once: {secret}")

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key in queryset:
            api_key_revoke(key=key)
        messages.success(request, f"Revoked {queryset.count()} key(s).")
