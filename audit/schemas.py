"""Wire formats of the audit API: events, a verification report, the signed chain head."""

from __future__ import annotations

import json
from typing import Annotated, Any

from ninja import Schema
from pydantic import BaseModel, Field

from audit.models import AuditEvent as EventRow
from keelgate.audit import ChainReport
from sitekit.api import INPUT, JSON_INTEGER

__all__ = [
    "AuditEventOut",
    "AuditPageOut",
    "ChainDigestIn",
    "ChainDigestOut",
    "ChainReportOut",
    "event_out",
    "report_out",
]


class AuditEventOut(BaseModel):
    """One link of the tenant's chain, exactly as stored and hashed."""

    seq: int
    at: str = Field(description="ISO-8601 text exactly as hashed.")
    actor: str
    kind: str
    body: dict[str, Any] = Field(description="The event's JSON body. Values may quote untrusted text.")
    prev_hash: str
    hash: str


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


def event_out(row: EventRow) -> AuditEventOut:
    """One stored event."""
    return AuditEventOut(
        seq=row.seq,
        at=row.at,
        actor=row.actor,
        kind=row.kind,
        body=_body(row.body),
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


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
