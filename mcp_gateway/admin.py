"""Admin for upstream MCP servers: the policy is validated as the command validates it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from keelgate.contrib.mcp import IdentityError, PolicyError, check_upstream_name, load_policy
from mcp_gateway.models import Upstream


class UpstreamForm(forms.ModelForm):
    """One of command and url; a name that can prefix tools; a policy that validates."""

    url = forms.URLField(required=False, max_length=2000, assume_scheme="https")

    class Meta:
        model = Upstream
        fields = ("tenant_id", "name", "command", "url", "policy")

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
    readonly_fields = ("tools", "tools_listed_at", "created_at", "updated_at")
