"""C2SP ``tlog-cosignature`` (``cosignature/v1``, Ed25519): a witness's line on a checkpoint.

Restated from the specification, not read back from the code: the key id is the first four
bytes of SHA-256(name || 0x0A || 0x04 || public key); the line is an em dash, a space, the
witness's name, a space and base64(key id || u64 big-endian timestamp || Ed25519 signature),
the signature over ``cosignature/v1\\n``, ``time <T>\\n`` and the checkpoint's text.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from keelgate.audit import (
    CosignerKey,
    NoteError,
    VerifierKey,
    cosign,
    cosigner_key,
    note_cosignatures,
    open_note,
    sign_note,
    verifier_key,
    verify_cosignatures,
)

ORIGIN = "keelgate.example/keelgate/acme"
TEXT = f"{ORIGIN}\n42\n" + base64.b64encode(b"\x07" * 32).decode() + "\n"
WITNESS = "witness.example/w1"
LOG_KEY = Ed25519PrivateKey.from_private_bytes(b"\x01" * 32)
WITNESS_KEY = Ed25519PrivateKey.from_private_bytes(b"\x02" * 32)
T = 1_767_225_600


def _public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def test_the_line_is_key_id_timestamp_and_a_signature_over_the_cosigned_message() -> None:
    """cosign writes '— name base64(id || u64 time || sig)'; the id hashes type 0x04; the
    signature is over 'cosignature/v1\\ntime T\\n' + the checkpoint text."""
    line = cosign(TEXT, WITNESS, WITNESS_KEY, T)
    assert line.startswith(f"\u2014 {WITNESS} ") and line.endswith("\n")
    raw = base64.b64decode(line.rstrip("\n").split(" ")[2], validate=True)
    assert raw[:4] == hashlib.sha256(WITNESS.encode() + b"\n\x04" + _public(WITNESS_KEY)).digest()[:4]
    assert int.from_bytes(raw[4:12], "big") == T and len(raw) == 4 + 8 + 64
    WITNESS_KEY.public_key().verify(raw[12:], f"cosignature/v1\ntime {T}\n{TEXT}".encode())


def test_the_witness_vkey_round_trips_and_is_not_a_note_key() -> None:
    """name+id+base64(0x04 || key) parses back; as a signed-note verifier key (0x01) it is refused."""
    key = cosigner_key(WITNESS, WITNESS_KEY)
    text = str(key)
    assert base64.b64decode(text.split("+", 2)[2])[:1] == b"\x04"
    assert CosignerKey.parse(text) == key
    with pytest.raises(NoteError, match="not an Ed25519 key"):
        VerifierKey.parse(text)
    with pytest.raises(NoteError, match="0x04"):
        CosignerKey.parse(str(verifier_key(WITNESS, WITNESS_KEY)))
    forged_id = f"{WITNESS}+00000000+{text.split('+', 2)[2]}"
    with pytest.raises(NoteError, match="id does not match"):
        CosignerKey.parse(forged_id)


def test_a_cosigned_note_opens_with_the_log_key_and_yields_the_witness_cosignature() -> None:
    """The log's key still opens the note (the witness line is skipped); the witness key finds
    its cosignature, with its time."""
    note = sign_note(TEXT, ORIGIN, LOG_KEY) + cosign(TEXT, WITNESS, WITNESS_KEY, T)
    text, signers = open_note(note, [verifier_key(ORIGIN, LOG_KEY)])
    assert text == TEXT and [s.name for s in signers] == [ORIGIN]
    [found] = note_cosignatures(note, [cosigner_key(WITNESS, WITNESS_KEY)])
    assert found.key == cosigner_key(WITNESS, WITNESS_KEY) and found.timestamp == T
    assert note_cosignatures(sign_note(TEXT, ORIGIN, LOG_KEY), [cosigner_key(WITNESS, WITNESS_KEY)]) == []


def test_a_forged_cosignature_is_refused_naming_the_witness() -> None:
    """A line with the witness's name and id whose signature is another key's, or whose
    time was changed, or over another checkpoint, does not verify."""
    witness = cosigner_key(WITNESS, WITNESS_KEY)
    other = Ed25519PrivateKey.from_private_bytes(b"\x03" * 32)
    forged = cosign(TEXT, WITNESS, other, T).rstrip("\n")
    raw = base64.b64decode(forged.split(" ")[2])
    forged = f"\u2014 {WITNESS} " + base64.b64encode(witness.key_id + raw[4:]).decode()
    good = base64.b64decode(cosign(TEXT, WITNESS, WITNESS_KEY, T).rstrip("\n").split(" ")[2])
    retimed = (
        f"\u2014 {WITNESS} " + base64.b64encode(good[:4] + (T + 1).to_bytes(8, "big") + good[12:]).decode()
    )
    other_text = TEXT.replace("\n42\n", "\n43\n")
    for line, text in [
        (forged, TEXT),
        (retimed, TEXT),
        (cosign(TEXT, WITNESS, WITNESS_KEY, T).rstrip("\n"), other_text),
    ]:
        with pytest.raises(NoteError, match=f"cosignature by {WITNESS} does not verify"):
            verify_cosignatures(text, [line], [witness])


def test_lines_by_unknown_keys_are_ignored_and_malformed_ones_refused() -> None:
    """Another witness's line is skipped; a line that is not a signature line is an error."""
    witness = cosigner_key(WITNESS, WITNESS_KEY)
    stranger = cosign(TEXT, "other.example/w", Ed25519PrivateKey.from_private_bytes(b"\x05" * 32), T)
    assert verify_cosignatures(TEXT, [stranger.rstrip("\n")], [witness]) == []
    with pytest.raises(NoteError, match="malformed"):
        verify_cosignatures(TEXT, ["not a signature"], [witness])
    short = f"\u2014 {WITNESS} " + base64.b64encode(witness.key_id + b"\x00" * 8 + b"\x01" * 10).decode()
    with pytest.raises(NoteError, match="not a timestamped Ed25519 signature"):
        verify_cosignatures(TEXT, [short], [witness])
