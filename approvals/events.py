"""Wire formats of the live inbox: pydantic models with ``extra="forbid"``.

Two directions cross a trust boundary here. The outbox tailer sends :class:`OutboxBatch`
to a tenant's channel-layer group (possibly through Redis, so it must survive msgpack);
a browser sends :class:`ResumeRequest` over its websocket. Both are validated on
receipt: an unexpected field is an error, not something to ignore. What the consumer
sends back to the browser is HTML for htmx (escaped by the template engine), not JSON.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = ["OutboxBatch", "OutboxItem", "ResumeRequest", "tenant_group"]

TenantSlug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
"""The shape of ``tenants.models.Tenant.slug``: also a valid channel-layer group suffix."""

_WIRE = ConfigDict(extra="forbid", frozen=True)


def tenant_group(tenant_id: str) -> str:
    """The channel-layer group of one tenant's inbox watchers."""
    return f"keelgate.inbox.{tenant_id}"


class OutboxItem(BaseModel):
    """One audit event as the inbox needs it: which run (and action) it touched."""

    model_config = _WIRE

    seq: int = Field(ge=1)
    kind: str = Field(max_length=64)
    actor: str = Field(max_length=200)
    run_id: str | None = Field(default=None, max_length=128)
    action_id: str | None = Field(default=None, max_length=64)


class OutboxBatch(BaseModel):
    """New events of one tenant's chain, ``first_seq`` to ``last_seq`` with no gap.

    ``complete`` is False when there were too many to list: ``items`` is then empty and
    a receiver re-reads the inbox instead of patching it.
    """

    model_config = _WIRE

    type: Literal["outbox.batch"] = "outbox.batch"
    """The channel-layer handler name (``InboxConsumer.outbox_batch``)."""
    tenant_id: TenantSlug
    first_seq: int = Field(ge=1)
    last_seq: int = Field(ge=1)
    items: list[OutboxItem] = Field(default_factory=list)
    complete: bool = True


class ResumeRequest(BaseModel):
    """A browser (re)connecting: the last chain number it has seen per tenant.

    The consumer replays what changed after those numbers, so a browser that was
    offline for a moment misses nothing. A tenant the user does not belong to is ignored.
    """

    model_config = _WIRE

    type: Literal["resume"]
    since: dict[TenantSlug, Annotated[int, Field(ge=0)]] = Field(default_factory=dict, max_length=1000)
