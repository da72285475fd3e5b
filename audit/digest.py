"""Signed chain-head digests: a copy kept elsewhere proves history was not rewritten.

A digest names a tenant's verified head ``(seq, hash)`` at a moment and is signed with
the site's Ed25519 key (``KEELGATE_AUDIT_SIGNING_KEY``). Anyone who later rewrites the
chain up to that head, even recomputing every hash, cannot produce the same hash at
``seq`` and cannot re-sign the digest without the key.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings

from keelgate.canonical import canonical_bytes
from keelgate.errors import ConfigurationError
from sitekit.errors import DigestError, DigestKeyMismatchError, DigestSignatureError

__all__ = ["ChainDigest", "sign_head", "signing_key", "verify_digest"]

_FIELDS = frozenset({"tenant_id", "seq", "hash", "exported_at", "public_key", "signature"})
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ChainDigest(TypedDict):
    """The exported form of a digest, as written to JSON."""

    tenant_id: str
    seq: int
    hash: str
    exported_at: str
    public_key: str
    signature: str


def sign_head(tenant_id: str, seq: int, hash_: str) -> ChainDigest:
    """Sign a verified head ``(seq, hash)`` of the tenant's chain with the site's key.

    The caller verifies first (:func:`audit.selectors.audit_digest`): a digest vouches
    for history, so it must never be made over a broken chain.
    """
    key = signing_key()
    exported_at = datetime.now(UTC).isoformat(timespec="microseconds")
    payload = _signed_bytes(tenant_id, seq, hash_, exported_at)
    return ChainDigest(
        tenant_id=tenant_id,
        seq=seq,
        hash=hash_,
        exported_at=exported_at,
        public_key=_b64(_raw_public(key.public_key())),
        signature=_b64(key.sign(payload)),
    )


def verify_digest(digest: Mapping[str, Any]) -> None:
    """Return only if ``digest`` is well formed and was signed by this site's key.

    Raises :class:`DigestError` (malformed), :class:`DigestKeyMismatchError` (another
    key) or :class:`DigestSignatureError` (edited or forged).
    """
    if not isinstance(digest, Mapping):
        raise DigestError("not an object")
    missing = sorted(_FIELDS - digest.keys())
    if missing:
        raise DigestError(f"missing {', '.join(missing)}")
    extra = sorted(str(k) for k in digest.keys() - _FIELDS)
    if extra:
        # Unsigned extras could be mistaken for vouched-for data: refuse them.
        raise DigestError(f"unexpected {', '.join(extra)}")
    tenant_id, seq, hash_, exported_at = (
        digest["tenant_id"],
        digest["seq"],
        digest["hash"],
        digest["exported_at"],
    )
    if not isinstance(tenant_id, str) or not tenant_id:
        raise DigestError("tenant_id")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise DigestError("seq")
    if not isinstance(hash_, str) or not _HEX64.fullmatch(hash_):
        raise DigestError("hash")
    if not isinstance(exported_at, str) or not _is_aware_iso(exported_at):
        raise DigestError("exported_at")
    public_key = _unb64(digest["public_key"], 32, "public_key")
    signature = _unb64(digest["signature"], 64, "signature")
    ours = signing_key().public_key()
    if public_key != _raw_public(ours):
        raise DigestKeyMismatchError()
    try:
        ours.verify(signature, _signed_bytes(tenant_id, seq, hash_, exported_at))
    except InvalidSignature as exc:
        raise DigestSignatureError() from exc


def _signed_bytes(tenant_id: str, seq: int, hash_: str, exported_at: str) -> bytes:
    # Canonical JSON, so a verifier in any language rebuilds exactly these bytes.
    return canonical_bytes({"tenant_id": tenant_id, "seq": seq, "hash": hash_, "exported_at": exported_at})


def signing_key() -> Ed25519PrivateKey:
    """The site's Ed25519 key (``KEELGATE_AUDIT_SIGNING_KEY``): digests and checkpoints."""
    # Read on every call, not cached: settings may change (tests, key rotation).
    try:
        raw = base64.b64decode(settings.KEELGATE_AUDIT_SIGNING_KEY, validate=True)
        return Ed25519PrivateKey.from_private_bytes(raw)
    except (ValueError, TypeError) as exc:  # binascii.Error is a ValueError
        raise ConfigurationError("KEELGATE_AUDIT_SIGNING_KEY is not base64 of 32 raw bytes") from exc


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(value: object, size: int, field: str) -> bytes:
    if not isinstance(value, str):
        raise DigestError(field)
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError as exc:  # binascii.Error, or non-ASCII text
        raise DigestError(field) from exc
    if len(raw) != size:
        raise DigestError(field)
    return raw


def _is_aware_iso(text: str) -> bool:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return False
    return parsed.tzinfo is not None and parsed.utcoffset() is not None
