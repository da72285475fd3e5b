"""Wire formats of the audit API: the events' filters, events, checkpoints, proofs, a
verification report, the signed chain head.

:class:`AuditFiltersIn` is also what the console's audit pages read their query string
with, so a filter means the same on a page and in ``GET /audit/events``.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

from ninja import Schema
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from audit.checkpoints import cosigned_note
from audit.models import LEGACY_CHAIN, Checkpoint
from audit.models import AuditEvent as EventRow
from audit.selectors import AUDIT_EVENTS, QUALIFIERS
from audit.tree import event_leaf
from keelgate.audit import ChainReport
from sitekit.api import BASE64, INPUT, JSON_INTEGER, NO_NUL, RUN_ID, SHA256_HEX
from sitekit.paging import qualifiers

__all__ = [
    "KIND",
    "AuditEventOut",
    "AuditFiltersIn",
    "AuditPageOut",
    "ChainDigestIn",
    "ChainDigestOut",
    "ChainReportOut",
    "ConsistencyProofOut",
    "InclusionProofOut",
    "SignedCheckpointOut",
    "SignedCheckpointPageOut",
    "VerifierKeyOut",
    "b64_hashes",
    "checkpoint_out",
    "event_out",
    "report_out",
]


KIND = r"^[a-z][a-z0-9_.]{0,63}$"
"""The shape of an audit event kind (``loop.reconciled``)."""

TIME_HELP = (
    "A date (its whole day, UTC) or an ISO 8601 time (as precise as written: `2026-12-01T10:30` is "
    "that minute; UTC unless it has an offset)."
)


def _blank_is_none(value: Any) -> Any:
    """A field sent empty (a console form's untouched box, ``?kind=``) is no filter."""
    return None if isinstance(value, str) and not value.strip() else value


_Text = Annotated[str | None, BeforeValidator(_blank_is_none)]


class AuditFiltersIn(Schema):
    """The audit list's filters, all combined (``audit.selectors.AUDIT_EVENTS``).

    ``q`` is a search line: GitHub-style qualifiers (``kind:`` or ``action:``, ``actor:``,
    ``run:``, ``tool:``, ``created:`` with a range such as ``>=2026-12-01`` or
    ``2026-12-01..2026-12-03``) and words, which are found in run ids. A qualifier and the
    field of the same name must agree. Every value is checked here: a bad one is an error
    naming its field, never an unfiltered list.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=False)

    kind: _Text = Field(None, pattern=KIND, description="Only events of this kind (`loop.reconciled`).")
    actor: _Text = Field(None, max_length=200, pattern=NO_NUL, description="Only events by this actor.")
    run: _Text = Field(None, pattern=RUN_ID, description="Only events of this run (its id, exactly).")
    tool: _Text = Field(None, max_length=200, pattern=NO_NUL, description="Only events about this tool.")
    from_: _Text = Field(None, alias="from", max_length=40, description=f"From this time on. {TIME_HELP}")
    to: _Text = Field(None, max_length=40, description=f"Up to this time, included. {TIME_HELP}")
    decisions: bool = Field(
        False,
        description=(
            "Only decisions: approval.decided, approval.edited, loop.reconciled, approval.escalated, "
            "approval.expired, run.cancel_requested, run.cancelled."
        ),
    )
    q: _Text = Field(
        None,
        max_length=200,
        pattern=NO_NUL,
        description=(
            "A search line: `kind:` (or `action:`), `actor:`, `run:`, `tool:`, `created:` qualifiers "
            "(`created:>=2026-12-01`, `created:2026-12-01..2026-12-03`) and text found in run ids."
        ),
    )

    @field_validator("from_", "to")
    @classmethod
    def _time(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            AUDIT_EVENTS.filters["from"].parse(value)  # ValueError: not a time
        return value

    @field_validator("q")
    @classmethod
    def _search(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        for name, said in _qualified(value).items():
            field = _FIELD_OF.get(name, name)
            if field == "created":
                AUDIT_EVENTS.filters["created"].parse(said)  # ValueError: not a range of times
            elif field != "q":
                try:  # the qualifier holds what its field would
                    cls.model_validate({field: said})
                except ValidationError as exc:
                    raise ValueError(f"{name}:{said} is not valid ({exc.errors()[0]['msg']})") from None
                given = info.data.get(field)
                if given is not None and given != said:
                    raise ValueError(f"{name}:{said} contradicts {field}={given}")
        return value

    def listing_values(self) -> dict[str, Any]:
        """The filters as :data:`audit.selectors.AUDIT_EVENTS` takes them (parsed; None: not set)."""
        given: dict[str, Any] = {
            "kind": self.kind,
            "actor": self.actor,
            "run": self.run,
            "tool": self.tool,
            "from": self.from_,
            "to": self.to,
            "decisions": "1" if self.decisions else None,
        }
        if self.q is not None:
            for name, said in _qualified(self.q).items():
                given[_FIELD_OF.get(name, name)] = said
        return {
            name: AUDIT_EVENTS.filters[name].parse(value)
            for name, value in given.items()
            if value is not None
        }

    def query(self) -> dict[str, str]:
        """The filters set, by their query parameter names (for a link that keeps them)."""
        found = self.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
        return {name: "1" if value is True else str(value) for name, value in found.items()}


_FIELD_OF = {"action": "kind"}
"""A qualifier named otherwise than its field."""


def _qualified(search: str) -> dict[str, str]:
    return qualifiers(search, QUALIFIERS)


class AuditEventOut(BaseModel):
    """One event of the tenant's log, exactly as stored and hashed."""

    seq: int
    at: str = Field(description="ISO-8601 text exactly as hashed.")
    actor: str
    kind: str
    run_id: str = Field(description="The run the event is about, or empty.")
    tool: str = Field(description="The tool the event is about, or empty.")
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


class SignedCheckpointOut(BaseModel):
    """One signed checkpoint of the tenant's tree."""

    size: int
    root: str = Field(description="The tree's root at `size`, base64 (as in the note).")
    signed_at: str
    note: str = Field(
        description=(
            "The C2SP signed note as signed, then a `cosignature/v1` signature line per witness that "
            "cosigned it."
        )
    )


class SignedCheckpointPageOut(BaseModel):
    """Checkpoints newest first; pass ``next_before_size`` as ``before_size`` for older ones."""

    items: list[SignedCheckpointOut]
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
    """A page of events: oldest first (pass ``next_after_seq`` as ``after_seq`` for more), or
    with ``newest_first`` newest first (pass ``next_before_seq`` as ``before_seq``)."""

    items: list[AuditEventOut]
    next_after_seq: int | None
    next_before_seq: int | None = None


class ChainReportOut(BaseModel):
    """What verifying the chain found: ok, or the first number at which it breaks."""

    ok: bool
    checked: int = Field(
        description=(
            "The events checked up to `head_seq`: after a retirement, those the live log keeps "
            "(the retired ones are proven by their archive and the kept hashes)."
        )
    )
    head_seq: int
    head_hash: str
    first_bad_seq: int | None
    reason: str | None = Field(
        description=(
            "hash_mismatch, prev_hash_mismatch, sequence_gap, leaf_mismatch, node_mismatch, "
            "root_mismatch, checkpoint_mismatch, version_order, retired_mismatch, digest_mismatch "
            "or head_mismatch."
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
    hash: str = Field(pattern=SHA256_HEX)
    exported_at: str = Field(max_length=64, pattern=r"^[0-9T:+.Z-]+$")
    public_key: str = Field(max_length=64, pattern=BASE64)
    signature: str = Field(max_length=128, pattern=BASE64)


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
        run_id=row.run_id,
        tool=row.tool,
        body=_body(row.body),
        prev_hash=row.prev_hash if chained else None,
        hash=row.hash if chained else None,
        leaf_index=row.seq - 1,
        leaf=_leaf(row),
        leaf_hash=row.leaf_hash,
    )


def checkpoint_out(row: Checkpoint) -> SignedCheckpointOut:
    """One stored checkpoint."""
    return SignedCheckpointOut(
        size=row.size,
        root=base64.b64encode(bytes.fromhex(row.root)).decode(),
        signed_at=row.signed_at.isoformat(),
        note=cosigned_note(row),
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
