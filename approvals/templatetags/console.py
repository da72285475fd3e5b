"""Filters for untrusted text and small display helpers, plus the navigation counts.

None of these marks anything safe: they return plain strings, and the template engine
escapes them like any other value.
"""

from __future__ import annotations

import json
from typing import Any

from django import template

from approvals.selectors import inbox_counts
from keelgate.errors import message_for
from tenants.selectors import admin_tenant_ids, tenant_ids

register = template.Library()


@register.filter
def pretty_json(text: Any) -> str:
    """JSON text (or a value) indented for reading; anything that is not JSON, as is."""
    if text is None:
        return ""
    value = text
    if isinstance(text, (str, bytes)):
        try:
            value = json.loads(text)
        except ValueError:
            return text if isinstance(text, str) else text.decode("utf-8", "replace")
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(text)


@register.filter
def error_wording(code: str | None) -> str:
    """The fixed wording of an error code (trusted: it comes from ``keelgate.errors``)."""
    return message_for(code) if code else ""


@register.filter
def short_hash(value: str | None) -> str:
    """The first 12 hex digits of a hash."""
    return (value or "")[:12]


@register.filter
def percent(used: Any, limit: Any) -> int:
    """``used`` as a whole percentage of ``limit``, clamped to 0..100 (0 without a limit)."""
    try:
        used_f, limit_f = float(used or 0), float(limit)
    except (TypeError, ValueError):
        return 0
    if limit_f <= 0:
        return 100 if used_f > 0 else 0
    return max(0, min(100, round(100 * used_f / limit_f)))


@register.simple_tag(takes_context=True)
def nav_counts(context: template.Context) -> dict[str, int]:
    """How many approvals and unknown outcomes wait in the user's tenants.

    A view that already counted passes ``nav_counts`` in its context; otherwise two
    count queries.
    """
    known = context.get("nav_counts")
    if isinstance(known, dict):
        return known
    request = context.get("request")
    if request is None or not request.user.is_authenticated:
        return {"approvals": 0, "unknown": 0}
    return inbox_counts(tenant_ids=tenant_ids(request))


@register.simple_tag
def query_with(view: Any, **changes: Any) -> str:
    """The view's query string with ``changes`` applied (None removes a key); escaped by the template."""
    return str(view.query(**{k: (str(v) if v is not None else None) for k, v in changes.items()}))


@register.simple_tag(takes_context=True)
def admin_anywhere(context: template.Context) -> bool:
    """True if the user is an admin of any tenant: the People and API keys links show."""
    request = context.get("request")
    return request is not None and request.user.is_authenticated and bool(admin_tenant_ids(request))
