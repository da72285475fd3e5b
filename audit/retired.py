"""What the live log no longer serves: the cut below which a tenant's events were retired.

Retired events (:mod:`audit.retention`) were archived to a verified bundle and deleted;
their subtree hashes stay, so roots, consistency proofs and the proofs of kept events
are whole. Asking for a retired event itself (its page, its inclusion proof, an export
from it) is a stable 410 ``audit_retired`` (:class:`~sitekit.errors.AuditRetiredError`),
never a 404: it existed, and its archive holds it. Lists simply start at the cut.
"""

from __future__ import annotations

from audit.models import ChainHead
from sitekit.errors import AuditRetiredError

__all__ = ["first_kept", "refuse_retired"]


def first_kept(tenant_id: str) -> int:
    """The lowest event number the tenant's live log still serves (1 until a retirement)."""
    found = ChainHead.objects.filter(tenant_id=tenant_id).values_list("retired_below", flat=True).first()
    return max(int(found or 1), 1)


def refuse_retired(tenant_id: str, seq: int, field: str = "") -> int:
    """The tenant's first kept event; :class:`~sitekit.errors.AuditRetiredError` (naming
    ``field``) if ``seq`` is below it."""
    kept = first_kept(tenant_id)
    if 1 <= seq < kept:
        raise AuditRetiredError(field, kept)
    return kept
