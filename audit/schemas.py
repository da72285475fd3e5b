"""Wire formats of the audit API: events, a verification report, the signed chain head."""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

from ninja import Schema
from pydantic import BaseModel, Field

from audit.models import LEGACY_CHAIN, Checkpoint
from audit.models import AuditEvent as EventRow
from audit.tree import event_leaf
from keelgate.audit import ChainReport
from sitekit.api import INPUT, JSON_INTEGER

__all__ = [
    "AuditEventOut",
    "AuditPageOut",
    "ChainDigestIn",
    "ChainDigestOut",
    "ChainReportOut",
    "CheckpointOut",
    "CheckpointPageOut",
    "ConsistencyProofOut",
    "InclusionProofOut",
    "VerifierKeyOut",
    "b64_hashes",
    "checkpoint_out",
    "event_out",
    "report_out",
]


class AuditEventOut(BaseModel):
    """One event of the tenant's log, exactly as stored and hashed."""

    seq: int
    at: str = Field(description="ISO-8601 text exactly as hashed.")
    actor: str
    kind: str
    body: dict[str, Any] = Field(description="The event's JSON body. Values may quote untrusted text.")
    prev_hash: str | None = Field(
        description="Hash-chained events (`leaf.v` 1) only: the previous event's hash."
    )
    hash: str | None = Field(description="Hash-chained events only: this event's chain hash.")
    leaf_index: int = Field(description="The event's leaf in the tenant's Merkle tree: `seq - 1`.")
    leaf: dict[str, Any] = Field(
        description=(
            "The leaf object: its RFC 8785 (JCS) bytes are the leaf's data, so "
            "`sha256(0x00 || JCS(leaf))` is the leaf hash. Fields: `v`, `tenant_id`, `seq`, "
            "`at`, `actor`, `kind`, `body`, and for `v` 1 `prev_hash` and `hash`."
        )
    )
    leaf_hash: str = Field(description="The leaf's hash, hex.")


class CheckpointOut(BaseModel):
    """One signed checkpoint of the tenant's tree."""

    size: int
    root: str = Field(description="The tree's root at `size`, base64 (as in the note).")
    signed_at: str
    note: str = Field(description="The C2SP signed note exactly as signed.")


class CheckpointPageOut(BaseModel):
    """Checkpoints newest first; pass ``next_before_size`` as ``before_size`` for older ones."""

    items: list[CheckpointOut]
    next_before_size: int | None


class InclusionProofOut(BaseModel):
    """RFC 9162 §2.1.3: the event's leaf is in the tree of ``tree_size``."""

    leaf_index: int
    tree_size: int
    hashes: list[str] = Field(description="Base64, the sibling nearest the leaf first (RFC 9162 order).")


class ConsistencyProofOut(BaseModel):
    """RFC 9162 §2.1.4: the tree of ``first`` leaves is a prefix of the tree of ``second``."""

    first: int
    second: int
    hashes: list[str] = Field(description="Base64, in RFC 9162 order.")


class VerifierKeyOut(BaseModel):
    """The key that verifies the tenant's checkpoints."""

    origin: str
    vkey: str = Field(description="C2SP signed-note verifier key: `name+keyid+base64(0x01 || key)`.")


class AuditPageOut(BaseModel):
    """Events oldest first; pass ``next_after_seq`` as ``after_seq`` for more."""

    items: list[AuditEventOut]
    next_after_seq: int | None


class ChainReportOut(BaseModel):
    """What verifying the chain found: ok, or the first number at which it breaks."""

    ok: bool
    checked: int
    head_seq: int
    head_hash: str
    first_bad_seq: int | None
    reason: str | None = Field(
        description=(
            "hash_mismatch, prev_hash_mismatch, sequence_gap, wrong_tenant, digest_mismatch or head_mismatch."
        )
    )


class ChainDigestOut(BaseModel):
    """The verified chain head, signed with the site's Ed25519 key: keep it, compare later."""

    tenant_id: str
    seq: int
    hash: str
    exported_at: str
    public_key: str = Field(description="The site's Ed25519 public key, base64.")
    signature: str = Field(
        description="Ed25519 over the canonical JSON of tenant_id, seq, hash, exported_at."
    )


class ChainDigestIn(Schema):
    """A digest from ``GET /audit/head``, to check the chain still holds it."""

    model_config = INPUT

    tenant_id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    seq: Annotated[int, Field(ge=1, le=2**63 - 1), JSON_INTEGER]
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    exported_at: str = Field(max_length=64, pattern=r"^[0-9T:+.Z-]+$")
    public_key: str = Field(max_length=64, pattern=r"^[A-Za-z0-9+/=]+$")
    signature: str = Field(max_length=128, pattern=r"^[A-Za-z0-9+/=]+$")


def _body(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {"value": body}


def _leaf(row: EventRow) -> dict[str, Any]:
    try:
        return event_leaf(row)
    except ValueError:  # a body edited into something unreadable: the page must still render
        return {}


def event_out(row: EventRow) -> AuditEventOut:
    """One stored (sequenced) event."""
    chained = row.version == LEGACY_CHAIN
    return AuditEventOut(
        seq=row.seq,
        at=row.at,
        actor=row.actor,
        kind=row.kind,
        body=_body(row.body),
        prev_hash=row.prev_hash if chained else None,
        hash=row.hash if chained else None,
        leaf_index=row.seq - 1,
        leaf=_leaf(row),
        leaf_hash=row.leaf_hash,
    )


def checkpoint_out(row: Checkpoint) -> CheckpointOut:
    """One stored checkpoint."""
    return CheckpointOut(
        size=row.size,
        root=base64.b64encode(bytes.fromhex(row.root)).decode(),
        signed_at=row.signed_at.isoformat(),
        note=row.note,
    )


def b64_hashes(hashes: list[bytes]) -> list[str]:
    """Proof hashes as the API sends them."""
    return [base64.b64encode(h).decode() for h in hashes]


def report_out(report: ChainReport) -> ChainReportOut:
    """A verification report."""
    return ChainReportOut(
        ok=report.ok,
        checked=report.checked,
        head_seq=report.head_seq,
        head_hash=report.head_hash,
        first_bad_seq=report.first_bad_seq,
        reason=report.reason,
    )
