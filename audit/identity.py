"""Identity's changes (members, invitations, API keys, sign-ins) written into the chain.

The services that make them are in ``tenants`` (below this app) and hand each event to
:data:`tenants.changes.identity_changed` inside their transaction; this receiver,
connected in ``AuditConfig.ready``, appends it there, so the change and its event
commit or roll back together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit.wiring import audit_log

__all__ = ["on_identity_changed"]


def on_identity_changed(
    sender: Any, *, tenant_id: str, actor: str, kind: str, body: Mapping[str, Any], **_: Any
) -> None:
    """Append the event :func:`tenants.changes.record` was handed, in the caller's transaction."""
    audit_log().append(tenant_id, actor=actor[:200], kind=kind, body=body)
