"""C2SP signed notes and tlog checkpoints, with Ed25519 keys.

A checkpoint (C2SP ``tlog-checkpoint``) is three lines, the log's origin, its tree size
and its root in base64, signed as a C2SP ``signed-note``: the text, a blank line, and
one line per signature, ``— <key name> base64(key id || signature)``. The verifier key
is published as ``<name>+<key id, hex>+base64(0x01 || public key)``, the form Go's
``golang.org/x/mod/sumdb/note`` reads, so its ``note.Open`` accepts what this signs.

A witness adds its own signature line to a checkpoint: a C2SP ``tlog-cosignature``
(``cosignature/v1``), an Ed25519 signature over ``cosignature/v1``, ``time <T>`` and the
checkpoint's text, with the time ``T`` (POSIX seconds, 8 bytes big-endian) before the
signature and a key of signature type 0x04 (:class:`CosignerKey`). A note verifier that
does not know the witness skips its line, so a cosigned note still opens with the log's key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a workflow sandbox (Temporal's) re-imports the engine
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "Checkpoint",
    "Cosignature",
    "CosignerKey",
    "NoteError",
    "VerifierKey",
    "cosign",
    "cosigner_key",
    "format_checkpoint",
    "note_cosignatures",
    "open_note",
    "parse_checkpoint",
    "sign_note",
    "verifier_key",
    "verify_cosignatures",
]

_ED25519 = b"\x01"
"""The signature-type byte of an Ed25519 key (C2SP signed-note)."""
_COSIGNATURE = b"\x04"
"""The signature-type byte of an Ed25519 cosigner key (C2SP tlog-cosignature, ``cosignature/v1``)."""
_COSIGNATURE_HEADER = "cosignature/v1\n"
_DASH = "\u2014 "
_NAME = re.compile(r"[^\s+\x00-\x1f]+")  # Go's note.Open refuses a control character anywhere
_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")


class NoteError(ValueError):
    """A note, a checkpoint or a key that is malformed, or a signature that does not verify."""


@dataclass(frozen=True)
class VerifierKey:
    """A parsed verifier key: who signs (``name``), its 4-byte id and its Ed25519 key."""

    name: str
    key_id: bytes
    public_key: bytes

    def __str__(self) -> str:
        return f"{self.name}+{self.key_id.hex()}+{_b64(_ED25519 + self.public_key)}"

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """Read ``name+hex id+base64`` and check the id is the key's. Raises :class:`NoteError`."""
        return cls(*_parse_vkey(text, _ED25519, "verifier key", "an Ed25519 key"))


@dataclass(frozen=True)
class CosignerKey:
    """A witness's key (C2SP ``tlog-cosignature``, Ed25519, signature type 0x04): its name,
    4-byte id and Ed25519 key. Its vkey form is ``<name>+<key id, hex>+base64(0x04 || key)``."""

    name: str
    key_id: bytes
    public_key: bytes

    def __str__(self) -> str:
        return f"{self.name}+{self.key_id.hex()}+{_b64(_COSIGNATURE + self.public_key)}"

    @classmethod
    def parse(cls, text: str) -> CosignerKey:
        """Read ``name+hex id+base64(0x04 || key)``; check the id is the key's. Raises :class:`NoteError`."""
        return cls(
            *_parse_vkey(
                text, _COSIGNATURE, "witness key", "an Ed25519 cosignature/v1 key (signature type 0x04)"
            )
        )


@dataclass(frozen=True)
class Cosignature:
    """A witness's cosignature that verified: whose, when it was made (POSIX seconds), and
    its signature line (no newline), its base64 written afresh from the bytes that verified."""

    key: CosignerKey
    timestamp: int
    line: str


@dataclass(frozen=True)
class Checkpoint:
    """A tree's size and root under a log's origin, with any extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()


def _parse_vkey(text: str, kind: bytes, what: str, kind_words: str) -> tuple[str, bytes, bytes]:
    """``name+hex id+base64(kind || key)``, its id checked against name, kind and key:
    ``(name, key id, public key)``. Raises :class:`NoteError` naming ``what`` was wrong."""
    parts = text.strip().split("+", 2)  # the base64 may hold "+" too
    if len(parts) != 3 or not _NAME.fullmatch(parts[0]) or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
        raise NoteError(f"{what} is not name+keyid+base64")
    raw = _unb64(parts[2], what)
    if len(raw) != 33 or raw[:1] != kind:
        raise NoteError(f"{what} is not {kind_words}")
    name, key_id, public_key = parts[0], bytes.fromhex(parts[1]), raw[1:]
    if _key_id(name, public_key, kind) != key_id:
        raise NoteError(f"{what}'s id does not match its name and key")
    return name, key_id, public_key


def _key_id(name: str, public_key: bytes, kind: bytes = _ED25519) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + kind + public_key).digest()[:4]


def _raw_public(key: Ed25519PrivateKey) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def verifier_key(name: str, key: Ed25519PrivateKey) -> VerifierKey:
    """The verifier key that checks notes :func:`sign_note` signs with ``key`` as ``name``."""
    if not _NAME.fullmatch(name):
        raise NoteError("a key name is not empty and holds no space, '+' or control character")
    public = _raw_public(key)
    return VerifierKey(name, _key_id(name, public), public)


def cosigner_key(name: str, key: Ed25519PrivateKey) -> CosignerKey:
    """The witness key that checks cosignatures :func:`cosign` makes with ``key`` as ``name``."""
    if not _NAME.fullmatch(name):
        raise NoteError("a key name is not empty and holds no space, '+' or control character")
    public = _raw_public(key)
    return CosignerKey(name, _key_id(name, public, _COSIGNATURE), public)


def _cosigned_message(text: str, timestamp: int) -> bytes:
    return f"{_COSIGNATURE_HEADER}time {timestamp}\n{text}".encode()


def cosign(text: str, name: str, key: Ed25519PrivateKey, timestamp: int) -> str:
    """A witness's ``cosignature/v1`` line (with its newline) over the checkpoint ``text``
    at ``timestamp`` (POSIX seconds). What a witness does; the site's tests play one with it."""
    _check_text(text)
    if not 0 <= timestamp < 2**63:
        raise NoteError("a cosignature's time is between 0 and 2**63 - 1")
    vkey = cosigner_key(name, key)
    signature = key.sign(_cosigned_message(text, timestamp))
    return f"{_DASH}{name} {_b64(vkey.key_id + timestamp.to_bytes(8, 'big') + signature)}\n"


def verify_cosignatures(text: str, lines: list[str], keys: list[CosignerKey]) -> list[Cosignature]:
    """The cosignatures among signature ``lines`` (no newlines) by ``keys`` over the checkpoint
    ``text``, each checked; a line by another key is skipped (C2SP: ignore unknown keys).

    A malformed line, or one by a key of ``keys`` that does not verify, raises
    :class:`NoteError` naming the key, as ``note.Open`` does for a known signer.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    _check_text(text)
    by_id = {(k.name, k.key_id): k for k in keys}
    found: list[Cosignature] = []
    for line in lines:
        name, raw = _signature_line(line)
        key = by_id.get((name, raw[:4]))
        if key is None:
            continue
        if len(raw) != 4 + 8 + 64:
            raise NoteError(f"cosignature by {name} is not a timestamped Ed25519 signature")
        timestamp = int.from_bytes(raw[4:12], "big")
        if timestamp >= 2**63:
            raise NoteError(f"cosignature by {name} has a time past 2**63 - 1")
        try:
            Ed25519PublicKey.from_public_bytes(key.public_key).verify(
                raw[12:], _cosigned_message(text, timestamp)
            )
        except InvalidSignature as exc:
            raise NoteError(f"cosignature by {name} does not verify") from exc
        if all(c.key != key for c in found):
            found.append(Cosignature(key, timestamp, f"{_DASH}{name} {_b64(raw)}"))
    return found


def note_cosignatures(note: str, keys: list[CosignerKey]) -> list[Cosignature]:
    """The cosignatures by ``keys`` on the signed ``note``, each checked (:func:`verify_cosignatures`)."""
    text, lines = _split_note(note)
    return verify_cosignatures(text, lines, keys)


def format_checkpoint(checkpoint: Checkpoint) -> str:
    """The checkpoint's text, as signed (every line ends with a newline)."""
    lines = [checkpoint.origin, str(checkpoint.size), _b64(checkpoint.root), *checkpoint.extensions]
    for line in lines:
        if not line or "\n" in line:
            raise NoteError("checkpoint lines are not empty and hold no newline")
    return "".join(f"{line}\n" for line in lines)


def parse_checkpoint(text: str) -> Checkpoint:
    """Read a checkpoint's text (the note's body). Raises :class:`NoteError`."""
    if not text.endswith("\n"):
        raise NoteError("checkpoint does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or not lines[0]:
        raise NoteError("checkpoint has no origin, size and root")
    origin, size, root, *extensions = lines
    if not _SIZE.fullmatch(size) or int(size) >= 2**63:
        raise NoteError("checkpoint size is not a decimal number")
    raw = _unb64(root, "checkpoint root")
    if len(raw) != 32:
        raise NoteError("checkpoint root is not a SHA-256 hash")
    if any(not line for line in extensions):
        raise NoteError("checkpoint has an empty line")
    return Checkpoint(origin, int(size), raw, tuple(extensions))


def sign_note(text: str, name: str, key: Ed25519PrivateKey) -> str:
    """``text`` signed by ``key`` as ``name``: a C2SP signed note."""
    _check_text(text)
    vkey = verifier_key(name, key)
    signature = key.sign(text.encode())
    return f"{text}\n{_DASH}{name} {_b64(vkey.key_id + signature)}\n"


def open_note(note: str, keys: list[VerifierKey]) -> tuple[str, list[VerifierKey]]:
    """The note's text and the keys of ``keys`` that signed it; at least one must have.

    A signature line by a key not in ``keys`` is skipped (a witness's cosignature, say);
    one by a key in ``keys`` that does not verify is an error, as in Go's ``note.Open``.
    Raises :class:`NoteError`.
    """
    text, lines = _split_note(note)
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    by_id = {(k.name, k.key_id): k for k in keys}
    signed: list[VerifierKey] = []
    for line in lines:
        name, raw = _signature_line(line)
        key = by_id.get((name, raw[:4]))
        if key is None:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(key.public_key).verify(raw[4:], text.encode())
        except InvalidSignature as exc:
            raise NoteError(f"signature by {name} does not verify") from exc
        if key not in signed:
            signed.append(key)
    if not signed:
        raise NoteError("no signature by a known key")
    return text, signed


def _split_note(note: str) -> tuple[str, list[str]]:
    """A signed note's text and its signature lines (no newlines). Raises :class:`NoteError`."""
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise NoteError("not a signed note (no blank line before its signatures)")
    _check_text(note)  # all of it, signature lines too, as Go's note.Open does
    return note[: split + 1], note[split + 2 : -1].split("\n")


def _signature_line(line: str) -> tuple[str, bytes]:
    """A signature line's key name and decoded bytes (key id first). Raises :class:`NoteError`."""
    if not line.startswith(_DASH):
        raise NoteError("malformed signature line")
    name, _, encoded = line[len(_DASH) :].partition(" ")
    if not _NAME.fullmatch(name):
        raise NoteError("malformed signature line")
    raw = _unb64(encoded, "signature")
    if len(raw) < 5:
        raise NoteError("malformed signature line")
    return name, raw


def _check_text(text: str) -> None:
    if not text.endswith("\n") or any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("note text ends with a newline and holds no other control character")
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise NoteError("note text is not UTF-8 (it holds a lone surrogate)") from exc


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise NoteError(f"{what} is not base64") from exc
