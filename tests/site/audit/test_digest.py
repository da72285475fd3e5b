"""Signed head digests: export, verification, and catching a consistent rewrite of history.

A digest signs a tenant's head ``(seq, root)``: the tree's size and root hex, as
``GET /audit/head`` and ``audit_digest`` hand it out.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from audit.digest import verify_digest
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead
from audit.selectors import audit_digest, audit_verify
from audit.wiring import audit_log
from keelgate.canonical import canonical_bytes
from keelgate.errors import ChainBrokenError, ConfigurationError
from sitekit.errors import DigestError, DigestKeyMismatchError, DigestSignatureError, EmptyChainError
from tests.site.audit.test_tamper_sql import events_root, reseal

pytestmark = pytest.mark.django_db

TENANT = "acme"


def append(tenant_id: str, count: int) -> None:
    """Append ``count`` numbered events to a tenant through the real store."""
    log = audit_log()
    for n in range(count):
        log.append(tenant_id, actor="agent", kind="note", body={"n": n})


def other_key() -> str:
    """A fresh Ed25519 private key in the settings' format (base64 of 32 raw bytes)."""
    raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode()


def rewrite_from(tenant_id: str, start: int) -> None:
    """What a database writer can do: rewrite history from ``start``, recomputing every hash.

    The actor of every event from ``start`` on becomes ``mallory``; then every leaf hash,
    every subtree hash and the head's root are recomputed from the edited events
    (:func:`~tests.site.audit.test_tamper_sql.reseal`), so the log verifies again alone.
    """
    EventRow.objects.filter(tenant_id=tenant_id, seq__gte=start).update(actor="mallory")
    reseal(tenant_id)


def export(tmp_path: Path, *args: str) -> tuple[dict[str, Any], Path]:
    """Run ``audit_digest``, save its output to a file, and return both."""
    out = StringIO()
    call_command("audit_digest", *args, stdout=out)
    path = tmp_path / "digest.json"
    path.write_text(out.getvalue())
    return json.loads(out.getvalue()), path


def verify_against(path: Path) -> tuple[str, str | None]:
    """``verify_audit --against path``: stdout and the CommandError message, if any."""
    out = StringIO()
    try:
        call_command("verify_audit", "--against", str(path), stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


class TestChainDigest:
    """``chain_digest`` signs the verified head of a chain."""

    def test_fields(self) -> None:
        """The digest names the tenant, the tree's size and root, an aware export time, key and signature.

        The root is the one the events' own fields give (recomputed here from them alone),
        and the one the head stores."""
        append(TENANT, 3)
        digest = audit_digest(tenant_id=TENANT)
        assert set(digest) == {"tenant_id", "seq", "hash", "exported_at", "public_key", "signature"}
        assert (digest["tenant_id"], digest["seq"], digest["hash"]) == (TENANT, 3, events_root(TENANT))
        assert ChainHead.objects.get(tenant_id=TENANT).root == digest["hash"]
        assert datetime.fromisoformat(digest["exported_at"]).tzinfo is not None

    def test_a_later_digest_signs_the_grown_root(self) -> None:
        """Each append moves the root a digest signs: two heads, two roots, each the events' root then."""
        append(TENANT, 3)
        first = audit_digest(tenant_id=TENANT)
        append(TENANT, 1)
        second = audit_digest(tenant_id=TENANT)
        assert (first["seq"], second["seq"]) == (3, 4)
        assert first["hash"] != second["hash"] == events_root(TENANT)

    def test_signature_verifies_independently(self) -> None:
        """Anyone with the public key can check the signature over the canonical JSON of the four fields."""
        append(TENANT, 2)
        digest = audit_digest(tenant_id=TENANT)
        public = Ed25519PublicKey.from_public_bytes(base64.b64decode(digest["public_key"]))
        signed = {
            "tenant_id": digest["tenant_id"],
            "seq": digest["seq"],
            "hash": digest["hash"],
            "exported_at": digest["exported_at"],
        }
        public.verify(base64.b64decode(digest["signature"]), canonical_bytes(signed))

    def test_public_key_is_the_settings_key(self) -> None:
        """The public key is derived from ``KEELGATE_AUDIT_SIGNING_KEY``."""
        append(TENANT, 1)
        private = Ed25519PrivateKey.from_private_bytes(base64.b64decode(settings.KEELGATE_AUDIT_SIGNING_KEY))
        expected = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        assert base64.b64decode(audit_digest(tenant_id=TENANT)["public_key"]) == expected

    def test_refuses_a_broken_chain(self) -> None:
        """A broken chain is not signed: the digest would vouch for tampered history."""
        append(TENANT, 3)
        EventRow.objects.filter(tenant_id=TENANT, seq=2).update(actor="intruder")
        with pytest.raises(ChainBrokenError, match="seq 2"):
            audit_digest(tenant_id=TENANT)

    def test_refuses_an_empty_chain(self) -> None:
        """A tenant without events has nothing to digest."""
        with pytest.raises(EmptyChainError) as caught:
            audit_digest(tenant_id="nobody")
        assert caught.value.code == "audit_chain_empty"

    def test_bad_settings_key(self) -> None:
        """A signing key that is not base64 of 32 bytes is a configuration error."""
        append(TENANT, 1)
        with override_settings(KEELGATE_AUDIT_SIGNING_KEY="bm90IGEga2V5"), pytest.raises(ConfigurationError):
            audit_digest(tenant_id=TENANT)


class TestVerifyDigest:
    """``verify_digest`` accepts only well-formed digests signed by this site's key."""

    @pytest.fixture
    def digest(self) -> dict[str, Any]:
        """A fresh, valid digest of a three-event chain."""
        append(TENANT, 3)
        return dict(audit_digest(tenant_id=TENANT))

    def test_accepts_a_fresh_digest(self, digest: dict[str, Any]) -> None:
        """A digest just exported verifies."""
        verify_digest(digest)

    def test_accepts_a_json_round_trip(self, digest: dict[str, Any]) -> None:
        """A digest written to JSON and read back still verifies."""
        verify_digest(json.loads(json.dumps(digest)))

    def test_tampered_signature(self, digest: dict[str, Any]) -> None:
        """A signature with one byte flipped is refused as digest_signature_invalid."""
        raw = bytearray(base64.b64decode(digest["signature"]))
        raw[0] ^= 1
        digest["signature"] = base64.b64encode(bytes(raw)).decode()
        with pytest.raises(DigestSignatureError) as caught:
            verify_digest(digest)
        assert caught.value.code == "digest_signature_invalid"

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("seq", 2),
            ("hash", "0" * 64),
            ("tenant_id", "globex"),
            ("exported_at", "2030-01-01T00:00:00+00:00"),
        ],
    )
    def test_edited_field(self, digest: dict[str, Any], field: str, value: Any) -> None:
        """Editing any signed field makes the signature fail."""
        digest[field] = value
        with pytest.raises(DigestSignatureError):
            verify_digest(digest)

    def test_digest_from_another_key(self, digest: dict[str, Any]) -> None:
        """A digest exported by a site with another key is refused as digest_key_mismatch."""
        with override_settings(KEELGATE_AUDIT_SIGNING_KEY=other_key()):
            foreign = dict(audit_digest(tenant_id=TENANT))
        with pytest.raises(DigestKeyMismatchError) as caught:
            verify_digest(foreign)
        assert caught.value.code == "digest_key_mismatch"

    def test_our_public_key_but_another_signer(self, digest: dict[str, Any]) -> None:
        """A digest naming our public key but signed with another key fails the signature."""
        with override_settings(KEELGATE_AUDIT_SIGNING_KEY=other_key()):
            foreign = dict(audit_digest(tenant_id=TENANT))
        foreign["public_key"] = digest["public_key"]
        with pytest.raises(DigestSignatureError):
            verify_digest(foreign)

    @pytest.mark.parametrize(
        ("edit", "detail"),
        [
            (lambda d: d.pop("signature"), "missing signature"),
            (lambda d: d.pop("hash"), "missing hash"),
            (lambda d: d.update(note="trust me"), "unexpected note"),
            (lambda d: d.update(seq=True), "seq"),
            (lambda d: d.update(seq="3"), "seq"),
            (lambda d: d.update(seq=0), "seq"),
            (lambda d: d.update(tenant_id=""), "tenant_id"),
            (lambda d: d.update(hash="ABC"), "hash"),
            (lambda d: d.update(hash="A" * 64), "hash"),
            (lambda d: d.update(exported_at="yesterday"), "exported_at"),
            (lambda d: d.update(exported_at="2030-01-01T00:00:00"), "exported_at"),
            (lambda d: d.update(public_key="not base64!"), "public_key"),
            (lambda d: d.update(public_key=base64.b64encode(b"short").decode()), "public_key"),
            (lambda d: d.update(signature=123), "signature"),
            (lambda d: d.update(signature="é"), "signature"),
        ],
    )
    def test_malformed(self, digest: dict[str, Any], edit: Any, detail: str) -> None:
        """Missing, extra or malformed fields are refused as digest_invalid, naming the field."""
        edit(digest)
        with pytest.raises(DigestError) as caught:
            verify_digest(digest)
        assert type(caught.value) is DigestError
        assert caught.value.code == "digest_invalid"
        assert detail in str(caught.value)

    def test_not_an_object(self) -> None:
        """A JSON list is not a digest."""
        with pytest.raises(DigestError):
            verify_digest([])  # type: ignore[arg-type]


class TestRewriteDetection:
    """A digest kept elsewhere catches a rewrite that recomputed every hash."""

    def test_rewrite_passes_plain_verify_but_not_the_digest(self, tmp_path: Path) -> None:
        """After a consistent rewrite from seq 2, plain verify is ok; --against fails with digest_mismatch."""
        append(TENANT, 4)
        digest, path = export(tmp_path)
        assert digest["seq"] == 4
        append(TENANT, 2)
        rewrite_from(TENANT, 2)
        assert EventRow.objects.get(tenant_id=TENANT, seq=2).actor == "mallory"
        out = StringIO()
        call_command("verify_audit", stdout=out)
        assert out.getvalue().strip() == f"tenant={TENANT} events=6 head=6 ok"
        out, error = verify_against(path)
        assert error is not None
        assert f"tenant={TENANT} BROKEN at seq=4 reason=digest_mismatch" in error
        assert f"tenant={TENANT} BROKEN at seq=4 reason=digest_mismatch" in out

    def test_rewrite_after_the_digest_is_not_its_business(self, tmp_path: Path) -> None:
        """Rewriting only events after the digest's head passes --against: it vouches for its prefix only."""
        append(TENANT, 3)
        _, path = export(tmp_path)
        append(TENANT, 2)
        rewrite_from(TENANT, 4)
        assert verify_against(path)[1] is None

    def test_appends_after_the_digest_still_verify(self, tmp_path: Path) -> None:
        """Honest appends after the export keep --against ok, naming the new head."""
        append(TENANT, 3)
        _, path = export(tmp_path)
        append(TENANT, 4)
        out, error = verify_against(path)
        assert error is None
        assert out.strip() == f"tenant={TENANT} events=7 head=7 ok"

    def test_truncation_below_the_digest(self, tmp_path: Path) -> None:
        """Deleting events up to the digest's head (the tree and head resealed) is a digest_mismatch."""
        append(TENANT, 5)
        _, path = export(tmp_path)
        EventRow.objects.filter(tenant_id=TENANT, seq__gte=4).delete()
        reseal(TENANT)  # the nodes of the deleted events gone, the head moved back to 3
        assert ChainHead.objects.get(tenant_id=TENANT).seq == 3
        assert audit_verify(tenant_id=TENANT).ok
        _, error = verify_against(path)
        assert error is not None and "BROKEN at seq=5 reason=digest_mismatch" in error

    def test_tampered_digest_file_is_refused(self, tmp_path: Path) -> None:
        """--against a digest whose signature was edited fails with digest_signature_invalid."""
        append(TENANT, 2)
        digest, path = export(tmp_path)
        digest["signature"] = base64.b64encode(b"\0" * 64).decode()
        path.write_text(json.dumps(digest))
        _, error = verify_against(path)
        assert error is not None and error.startswith("digest_signature_invalid:")

    def test_digest_from_another_key_is_refused(self, tmp_path: Path) -> None:
        """--against a digest signed with another site's key fails with digest_key_mismatch."""
        append(TENANT, 2)
        with override_settings(KEELGATE_AUDIT_SIGNING_KEY=other_key()):
            _, path = export(tmp_path)
        _, error = verify_against(path)
        assert error is not None and error.startswith("digest_key_mismatch:")

    def test_against_another_tenant_is_refused(self, tmp_path: Path) -> None:
        """--tenant that differs from the digest's tenant is a command error, and so is the selector call."""
        append(TENANT, 2)
        append("globex", 2)
        digest, path = export(tmp_path, "--tenant", TENANT)
        with pytest.raises(CommandError, match="differs from the digest's tenant"):
            call_command("verify_audit", "--tenant", "globex", "--against", str(path), stdout=StringIO())
        with pytest.raises(DigestError, match="another tenant"):
            audit_verify(tenant_id="globex", against=digest)


class TestDigestCommand:
    """``audit_digest`` prints the digest JSON of one tenant."""

    def test_single_tenant_needs_no_option(self, tmp_path: Path) -> None:
        """With one tenant, the command digests it without --tenant, and the output verifies."""
        append(TENANT, 2)
        digest, _ = export(tmp_path)
        assert digest["tenant_id"] == TENANT and digest["seq"] == 2
        verify_digest(digest)

    def test_several_tenants_need_the_option(self, tmp_path: Path) -> None:
        """With several tenants, --tenant is required and then picks that tenant."""
        append(TENANT, 2)
        append("globex", 1)
        with pytest.raises(CommandError, match="pass --tenant"):
            call_command("audit_digest", stdout=StringIO())
        digest, _ = export(tmp_path, "--tenant", "globex")
        assert (digest["tenant_id"], digest["seq"]) == ("globex", 1)

    def test_no_chains(self) -> None:
        """With no chain at all the command fails clearly."""
        with pytest.raises(CommandError, match="no tenant has an audit chain"):
            call_command("audit_digest", stdout=StringIO())

    def test_broken_chain(self) -> None:
        """A broken chain is not digested; the error carries the code."""
        append(TENANT, 2)
        EventRow.objects.filter(tenant_id=TENANT, seq=1).update(body='{"n":5}')
        with pytest.raises(CommandError, match="audit_chain_broken"):
            call_command("audit_digest", stdout=StringIO())
