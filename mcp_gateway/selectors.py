"""Reading upstreams: always within one tenant (another tenant's upstream is simply absent)."""

from __future__ import annotations

from mcp_gateway.models import Upstream


def upstream_get(*, tenant_id: str, name: str) -> Upstream | None:
    """The tenant's upstream of that name, or None."""
    return Upstream.objects.filter(tenant_id=tenant_id, name=name).first()


def upstreams_for(*, tenant_id: str) -> list[Upstream]:
    """The tenant's upstreams, by name."""
    return list(Upstream.objects.filter(tenant_id=tenant_id).order_by("name"))
