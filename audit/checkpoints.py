"""Signed checkpoints: each tenant's tree size and root, as a C2SP note signed with the site's key.

A checkpoint is signed under the tenant's head lock from the head it reads, and the head
only ever grows by appending leaves (``audit.tree``), so every two checkpoints the site
signs are consistent: the smaller tree is a prefix of the larger. Every checkpoint is
stored. The verifier key is published in the signed-note form Go's ``sumdb/note`` reads.
A checkpoint is served with the cosignatures witnesses gave it (``audit.witnesses``) as
further signature lines (:func:`cosigned_note`), which a verifier that does not know the
witness skips.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.digest import signing_key
from audit.models import Checkpoint
from audit.tree import lock_head
from audit.wiring import integrate_pending
from keelgate.audit import Checkpoint as CheckpointBody
from keelgate.audit import VerifierKey, format_checkpoint, sign_note, verifier_key

__all__ = ["cosigned_note", "latest_checkpoint", "log_origin", "log_verifier_key", "sign_checkpoint"]


def log_origin(tenant_id: str) -> str:
    """The tenant's log origin (``KEELGATE_AUDIT_ORIGIN``): its checkpoints' first line."""
    return str(settings.KEELGATE_AUDIT_ORIGIN).replace("{tenant}", tenant_id)


def log_verifier_key(tenant_id: str) -> VerifierKey:
    """The key that verifies the tenant's checkpoints, named for its origin."""
    return verifier_key(log_origin(tenant_id), signing_key())


def latest_checkpoint(tenant_id: str) -> Checkpoint | None:
    """The tenant's newest signed checkpoint."""
    return Checkpoint.objects.filter(tenant_id=tenant_id).order_by("-size").first()


def cosigned_note(checkpoint: Checkpoint) -> str:
    """The checkpoint's note with a signature line per witness cosignature stored for it
    (prefetch ``cosignatures`` to read many without a query each)."""
    lines = sorted(checkpoint.cosignatures.all(), key=lambda c: (c.witness, c.key_id))
    return checkpoint.note + "".join(f"{c.line}\n" for c in lines)


def sign_checkpoint(
    tenant_id: str, *, every: timedelta | None = None, now: datetime | None = None, sequence: bool = True
) -> Checkpoint | None:
    """Sign and store a checkpoint of the tenant's tree as it is now, if it grew.

    None when the tree has not grown since the last checkpoint, when that one is younger
    than ``every``, or when another transaction holds the tenant's head (sequencing):
    the next call signs. Joins the caller's transaction if there is one. With
    ``sequence``, a batch of pending events is sequenced first, under the same lock.
    """
    now = now or timezone.now()
    with transaction.atomic():
        head = lock_head(tenant_id, wait=False)
        if head is None:
            return None
        if sequence:
            integrate_pending([tenant_id], drain=False)  # under the lock this transaction holds
            head.refresh_from_db()
        if head.seq == 0:
            return None
        last = latest_checkpoint(tenant_id)
        if last is not None and (
            last.size >= head.seq or (every is not None and now - last.signed_at < every)
        ):
            return None
        origin = log_origin(tenant_id)
        body = format_checkpoint(CheckpointBody(origin, head.seq, bytes.fromhex(head.root)))
        note = sign_note(body, origin, signing_key())
        return Checkpoint.objects.create(
            tenant_id=tenant_id, size=head.seq, root=head.root, note=note, signed_at=now
        )
