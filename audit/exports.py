"""Export bundles: a range of a tenant's events with everything an auditor needs to check them offline.

A bundle holds the events (their leaf objects), a signed checkpoint covering them, the
hashes that lead from them to its root, consistency proofs from the checkpoints the
auditor kept, and the verifier key (:func:`keelgate.audit.build_bundle`), so
``python -m keelgate.audit.verify`` checks it with the engine alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from audit.checkpoints import cosigned_note, latest_checkpoint, log_origin, log_verifier_key, sign_checkpoint
from audit.models import AuditEvent as EventRow
from audit.models import Checkpoint
from audit.retired import first_kept
from audit.tree import event_leaf, node_reader
from audit.wiring import integrate_pending
from keelgate.audit import build_bundle
from sitekit.errors import AuditRetiredError, EmptyChainError, ProofRangeError

__all__ = ["MAX_PREVIOUS", "export_bundle"]

MAX_PREVIOUS = 16
"""Kept checkpoints a bundle proves consistency from at most: each is a proof of O(log n) hashes."""


def export_bundle(
    tenant_id: str,
    *,
    from_seq: int | None = None,
    to_seq: int | None = None,
    previous_sizes: Iterable[int] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """The bundle of events ``from_seq..to_seq`` (default: the first the live log keeps to the
    newest), under the newest checkpoint, signed now if the log grew since.

    ``previous_sizes`` are the sizes of checkpoints the auditor kept: the bundle carries the
    proof the log only grew since each. With ``limit``, at most that many events (an API
    page). Raises :class:`EmptyChainError` for a tenant without events,
    :class:`ProofRangeError` naming the parameter out of range, and
    :class:`AuditRetiredError` naming the bound below the log's retention cut (those events
    are in the archive made when they were retired).
    """
    integrate_pending([tenant_id])
    sign_checkpoint(tenant_id)
    checkpoint: Checkpoint | None = latest_checkpoint(tenant_id)
    if checkpoint is None:
        raise EmptyChainError(tenant_id)
    kept = first_kept(tenant_id)
    last = checkpoint.size if to_seq is None else to_seq
    if not 1 <= last <= checkpoint.size:
        raise ProofRangeError("to_seq", f"between 1 and the signed size, {checkpoint.size}")
    if last < kept:
        raise AuditRetiredError("to_seq", kept)
    first = kept if from_seq is None else from_seq
    if not 1 <= first <= last:
        raise ProofRangeError("from_seq", f"between 1 and to_seq, {last}")
    if first < kept:
        raise AuditRetiredError("from_seq", kept)
    sizes = sorted(set(previous_sizes))
    if len(sizes) > MAX_PREVIOUS:
        raise ProofRangeError("previous", f"at most {MAX_PREVIOUS} checkpoint sizes")
    if sizes and not 1 <= sizes[0] <= sizes[-1] <= checkpoint.size:
        raise ProofRangeError("previous", f"between 1 and the signed size, {checkpoint.size}")
    if limit is not None:
        last = min(last, first + limit - 1)
    rows = EventRow.objects.filter(tenant_id=tenant_id, seq__gte=first, seq__lte=last).order_by("seq")
    read = list(rows.iterator(chunk_size=2000))
    events = [event_leaf(row) for row in read]
    if len(events) != last - first + 1 and first_kept(tenant_id) > first:
        raise AuditRetiredError("from_seq", first_kept(tenant_id))  # retired while this read
    return build_bundle(
        tenant_id=tenant_id,
        origin=log_origin(tenant_id),
        vkey=log_verifier_key(tenant_id),
        note=cosigned_note(checkpoint),
        events=events,
        read=node_reader(tenant_id),
        consistency_from=sizes,
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
