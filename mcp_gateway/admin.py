"""Admin for upstream MCP servers: validated as the command validates, saved (and audited) by its service."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from keelgate.contrib.mcp import IdentityError, PolicyError, check_upstream_name, load_policy
from mcp_gateway.models import Upstream
from mcp_gateway.services import upstream_register
from tenants.models import Tenant


class UpstreamForm(forms.ModelForm):
    """One of command and url; a name that can prefix tools; a policy that validates."""

    url = forms.URLField(required=False, max_length=2000, assume_scheme="https")

    class Meta:
        model = Upstream
        fields = ("tenant_id", "name", "command", "url", "policy")

    def clean_tenant_id(self) -> str:
        slug = str(self.cleaned_data["tenant_id"])
        if not Tenant.objects.filter(slug=slug).exists():
            raise forms.ValidationError("No such tenant.")
        return slug

    def clean_name(self) -> str:
        name = str(self.cleaned_data["name"])
        try:
            return check_upstream_name(name)
        except IdentityError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_policy(self) -> Any:
        try:
            return load_policy(dict(self.cleaned_data["policy"] or {})).model_dump(
                mode="json", exclude_defaults=True
            )
        except (PolicyError, TypeError, ValueError) as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool((data.get("command") or "").strip()) == bool((data.get("url") or "").strip()):
            raise forms.ValidationError("Give a command or a url, not both.")
        return data


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    form = UpstreamForm
    list_display = ("name", "tenant_id", "command", "url", "tools_listed_at")
    list_filter = ("tenant_id",)
    search_fields = ("name", "tenant_id")
    readonly_fields = ("tools", "tools_listed_at", "created_by", "created_at", "updated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Upstream | None = None) -> Any:
        """An upstream's tenant and name are its identity (its tools' prefix): fixed once made."""
        fixed = ("tenant_id", "name") if obj is not None and obj.pk else ()
        return (*fixed, *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: Upstream, form: Any, change: bool) -> None:
        """Saved by the service the command uses, so the change is audited the same way."""
        saved, _ = upstream_register(
            tenant_id=obj.tenant_id,
            name=obj.name,
            command=obj.command,
            url=obj.url,
            policy=obj.policy,
            actor=request.user.get_username(),
            via="admin",
        )
        obj.pk = saved.pk
        obj.refresh_from_db()
