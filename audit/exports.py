"""Export bundles: a range of a tenant's events with everything an auditor needs to check them offline.

A bundle holds the events (their leaf objects), a signed checkpoint covering them, the
hashes that lead from them to its root, consistency proofs from the checkpoints the
auditor kept, and the verifier key (:func:`keelgate.audit.build_bundle`), so
``python -m keelgate.audit.verify`` checks it with the engine alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from audit.checkpoints import latest_checkpoint, log_origin, log_verifier_key, sign_checkpoint
from audit.models import AuditEvent as EventRow
from audit.models import Checkpoint
from audit.tree import event_leaf, node_reader
from audit.wiring import integrate_pending
from keelgate.audit import build_bundle
from sitekit.errors import EmptyChainError, ProofRangeError

__all__ = ["export_bundle"]


def export_bundle(
    tenant_id: str,
    *,
    from_seq: int = 1,
    to_seq: int | None = None,
    previous_sizes: Iterable[int] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """The bundle of events ``from_seq..to_seq`` (default: to the newest), under the newest
    checkpoint, signed now if the log grew since.

    With ``limit``, at most that many events (an API page). Raises
    :class:`EmptyChainError` for a tenant without events and :class:`ProofRangeError`
    naming the parameter out of range.
    """
    integrate_pending([tenant_id])
    sign_checkpoint(tenant_id)
    checkpoint: Checkpoint | None = latest_checkpoint(tenant_id)
    if checkpoint is None:
        raise EmptyChainError(tenant_id)
    last = checkpoint.size if to_seq is None else to_seq
    if not 1 <= last <= checkpoint.size:
        raise ProofRangeError("to_seq", f"between 1 and the signed size, {checkpoint.size}")
    if not 1 <= from_seq <= last:
        raise ProofRangeError("from_seq", f"between 1 and to_seq, {last}")
    if limit is not None:
        last = min(last, from_seq + limit - 1)
    rows = EventRow.objects.filter(tenant_id=tenant_id, seq__gte=from_seq, seq__lte=last).order_by("seq")
    read = list(rows.iterator(chunk_size=2000))
    events = [event_leaf(row) for row in read]
    return build_bundle(
        tenant_id=tenant_id,
        origin=log_origin(tenant_id),
        vkey=log_verifier_key(tenant_id),
        note=checkpoint.note,
        events=events,
        read=node_reader(tenant_id),
        consistency_from=previous_sizes,
        leaf_hashes=_stated_leaf_hashes(read),
    )


def _stated_leaf_hashes(rows: list[EventRow]) -> list[bytes] | None:
    """The rows' stored leaf hashes, which let the verifier name an edited event; None
    if one is unreadable (the bundle then verifies, or fails, on its root alone)."""
    try:
        hashes = [bytes.fromhex(row.leaf_hash) for row in rows]
    except ValueError:
        return None
    return hashes if all(len(h) == 32 for h in hashes) else None
