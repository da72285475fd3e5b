"""C2SP signed notes and tlog checkpoints: the bytes they are, and every refusal with its reason.

The formats are restated here from the C2SP specifications (``signed-note``,
``tlog-checkpoint``), not read back from the code: a signature line is an em dash, a space,
the key's name, a space and base64(key id || Ed25519 signature over the text); the key id
is the first four bytes of SHA-256(name || 0x0A || 0x01 || public key).
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from keelgate.audit import (
    Checkpoint,
    NoteError,
    VerifierKey,
    format_checkpoint,
    open_note,
    parse_checkpoint,
    sign_note,
    verifier_key,
)

NAME = "keelgate.example/audit/tenant-1"
TEXT = "keelgate.example/audit/tenant-1\n42\n" + base64.b64encode(b"\x07" * 32).decode() + "\n"


def _key(seed: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)


def _public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


KEY, OTHER, THIRD = _key(1), _key(2), _key(3)


def _signature_line(note: str) -> str:
    """The last signature line of a note, newline included."""
    return note[note.rindex("\n\n") + 2 :]


def test_a_note_is_the_text_a_blank_line_and_an_em_dash_signature_line() -> None:
    """sign_note writes text, a blank line, then '— name base64(key id || signature)' and a newline."""
    note = sign_note(TEXT, NAME, KEY)
    assert note.startswith(TEXT + "\n\u2014 " + NAME + " ")
    assert note.endswith("\n") and note.count("\n") == TEXT.count("\n") + 2
    raw = base64.b64decode(note[len(TEXT) + 1 + 2 + len(NAME) + 1 : -1], validate=True)
    assert raw[:4] == hashlib.sha256(NAME.encode() + b"\n\x01" + _public(KEY)).digest()[:4]
    assert len(raw) == 4 + 64
    KEY.public_key().verify(raw[4:], TEXT.encode())  # raises if it does not verify


def test_the_key_id_is_the_first_four_bytes_of_sha256_of_name_newline_type_and_key() -> None:
    """verifier_key's id is SHA-256(name || 0x0A || 0x01 || public key)[:4], printed as 8 hex digits."""
    vkey = verifier_key(NAME, KEY)
    key_id = hashlib.sha256(NAME.encode() + b"\x0a" + b"\x01" + _public(KEY)).digest()[:4]
    assert vkey == VerifierKey(NAME, key_id, _public(KEY))
    encoded = base64.b64encode(b"\x01" + _public(KEY)).decode()
    assert str(vkey) == f"{NAME}+{key_id.hex()}+{encoded}"


def test_a_note_round_trips() -> None:
    """open_note gives back the text and the key that signed it."""
    vkey = verifier_key(NAME, KEY)
    assert open_note(sign_note(TEXT, NAME, KEY), [vkey]) == (TEXT, [vkey])


@given(
    text=st.text(st.characters(min_codepoint=0x20, exclude_categories=["Cs"]) | st.just("\n")).map(
        lambda t: t + "\n"
    ),
    name=st.text(
        st.characters(min_codepoint=0x21, exclude_categories=["Cs", "Zs", "Zl", "Zp"]), min_size=1
    ).filter(lambda n: "+" not in n and not any(c.isspace() for c in n)),
    seed=st.integers(min_value=0, max_value=255),
)
def test_any_text_signed_by_any_name_opens(text: str, name: str, seed: int) -> None:
    """Any text ending in a newline with no other control character, under any valid name, round trips,
    and its verifier key parses back to itself."""
    vkey = verifier_key(name, _key(seed))
    assert open_note(sign_note(text, name, _key(seed)), [vkey]) == (text, [vkey])
    assert VerifierKey.parse(str(vkey)) == vkey


def test_signatures_by_unknown_keys_are_skipped() -> None:
    """A cosignature by a key the reader does not know is skipped; the known keys' are returned in order."""
    vkey, third = verifier_key(NAME, KEY), verifier_key("witness.example", THIRD)
    note = (
        sign_note(TEXT, "witness.example", THIRD)
        + _signature_line(sign_note(TEXT, "unknown.example", OTHER))
        + _signature_line(sign_note(TEXT, NAME, KEY))
    )
    assert note.count("\u2014") == 3
    assert open_note(note, [vkey]) == (TEXT, [vkey])
    assert open_note(note, [vkey, third]) == (TEXT, [third, vkey])


def test_a_note_signed_by_no_known_key_is_refused() -> None:
    """Only unknown signers (a stranger, or another key under the reader's key's name): refused."""
    vkey = verifier_key(NAME, KEY)
    with pytest.raises(NoteError, match="no signature by a known key"):
        open_note(sign_note(TEXT, "stranger.example", OTHER), [vkey])
    with pytest.raises(NoteError, match="no signature by a known key"):
        open_note(sign_note(TEXT, NAME, OTHER), [vkey])
    with pytest.raises(NoteError, match="no signature by a known key"):
        open_note(sign_note(TEXT, NAME, KEY), [])


def test_a_known_key_whose_signature_does_not_verify_is_refused() -> None:
    """A bad signature by a known key is refused even beside a good one by another known key."""
    vkey, other = verifier_key(NAME, KEY), verifier_key("other.example", OTHER)
    good = sign_note(TEXT, NAME, KEY)
    raw = bytearray(base64.b64decode(good.rsplit(" ", 1)[1]))
    raw[10] ^= 1
    bad = good.rsplit(" ", 1)[0] + " " + base64.b64encode(bytes(raw)).decode() + "\n"
    with pytest.raises(NoteError, match=f"signature by {NAME} does not verify"):
        open_note(bad, [vkey])
    with pytest.raises(NoteError, match=f"signature by {NAME} does not verify"):
        open_note(sign_note(TEXT, "other.example", OTHER) + _signature_line(bad), [vkey, other])


def test_a_tampered_text_is_refused() -> None:
    """Changing one character of the signed text breaks its signature."""
    vkey = verifier_key(NAME, KEY)
    note = sign_note(TEXT, NAME, KEY).replace("\n42\n", "\n43\n")
    with pytest.raises(NoteError, match="does not verify"):
        open_note(note, [vkey])


def test_a_signature_over_another_text_is_refused() -> None:
    """A signature line moved from another note does not verify over this one."""
    vkey = verifier_key(NAME, KEY)
    moved = TEXT + "\n" + _signature_line(sign_note("another text\n", NAME, KEY))
    with pytest.raises(NoteError, match="does not verify"):
        open_note(moved, [vkey])


SIGNATURE = _signature_line(sign_note(TEXT, NAME, KEY))


@pytest.mark.parametrize(
    ("note", "message"),
    [
        (TEXT, "no blank line before its signatures"),
        (TEXT + "\n" + SIGNATURE[:-1], "no blank line before its signatures"),
        (TEXT + "\n", "malformed signature line"),
        (TEXT + "\n" + SIGNATURE.replace("\u2014", "-"), "malformed signature line"),
        (TEXT + "\n" + SIGNATURE.replace("\u2014 ", "\u2014"), "malformed signature line"),
        (TEXT + "\n" + SIGNATURE.replace("\u2014 ", "\u2014  "), "malformed signature line"),
        (TEXT + "\n" + SIGNATURE.replace(NAME, "a+b"), "malformed signature line"),
        (TEXT + "\n" + SIGNATURE + "\n", "malformed signature line"),
        (TEXT + "\n" + SIGNATURE.replace(" ", " !", 2), "signature is not base64"),
        (TEXT + "\n" + SIGNATURE[:-3] + "\n", "signature is not base64"),
        (TEXT + "\n\u2014 " + NAME + " AAAA\n", "malformed signature line"),
        (TEXT + "\n\u2014 " + NAME + " \n", "malformed signature line"),
        ("x\ty\n\n" + SIGNATURE, "no other control character"),
        ("x\ry\n\n" + SIGNATURE, "no other control character"),
    ],
)
def test_malformed_notes_are_refused(note: str, message: str) -> None:
    """A note that is not text, a blank line and well-formed signature lines is refused, saying what."""
    with pytest.raises(NoteError, match=message):
        open_note(note, [verifier_key(NAME, KEY)])


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ("no newline", NAME, "ends with a newline"),
        ("a\x00b\n", NAME, "no other control character"),
        ("a\tb\n", NAME, "no other control character"),
        (TEXT, "", "holds no space, '\\+' or control character"),
        (TEXT, "a b", "holds no space, '\\+' or control character"),
        (TEXT, "a+b", "holds no space, '\\+' or control character"),
        (TEXT, "a\u00a0b", "holds no space, '\\+' or control character"),
    ],
)
def test_sign_note_refuses_what_no_reader_could_open(text: str, name: str, message: str) -> None:
    """sign_note refuses a text without its final newline or with a control character, and a bad name."""
    with pytest.raises(NoteError, match=message):
        sign_note(text, name, KEY)


def _key_with_plus() -> Ed25519PrivateKey:
    for seed in range(256):
        if "+" in base64.b64encode(b"\x01" + _public(_key(seed))).decode():
            return _key(seed)
    raise AssertionError("no seed gives a key whose base64 holds '+'")


def test_a_verifier_key_whose_base64_holds_plus_parses() -> None:
    """The key's base64 may hold '+', the separator of the fields before it; it still parses."""
    key = _key_with_plus()
    vkey = verifier_key(NAME, key)
    text = str(vkey)
    assert text.count("+") > 2
    assert VerifierKey.parse(text) == vkey
    assert open_note(sign_note(TEXT, NAME, key), [VerifierKey.parse(text)]) == (TEXT, [vkey])


def _vkey_text(name: str = NAME, key_id: str | None = None, raw: bytes | None = None) -> str:
    raw = b"\x01" + _public(KEY) if raw is None else raw
    if key_id is None:
        key_id = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex()
    return f"{name}+{key_id}+{base64.b64encode(raw).decode()}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not name\\+keyid\\+base64"),
        (NAME, "not name\\+keyid\\+base64"),
        (f"{NAME}+0011aabb", "not name\\+keyid\\+base64"),
        (_vkey_text(name="a b"), "not name\\+keyid\\+base64"),
        (_vkey_text(name=""), "not name\\+keyid\\+base64"),
        (_vkey_text(key_id="0011aab"), "not name\\+keyid\\+base64"),
        (_vkey_text(key_id="0011aabbc"), "not name\\+keyid\\+base64"),
        (_vkey_text(key_id="0011aabg"), "not name\\+keyid\\+base64"),
        (_vkey_text() + "!", "verifier key is not base64"),
        (_vkey_text()[:-2], "verifier key is not base64"),
        (_vkey_text(raw=b"\x02" + _public(KEY)), "not an Ed25519 key"),
        (_vkey_text(raw=b"\x01" + _public(KEY)[:31]), "not an Ed25519 key"),
        (_vkey_text(raw=b"\x01" + _public(KEY) + b"\x00"), "not an Ed25519 key"),
        (_vkey_text(key_id="00000000"), "id does not match its name and key"),
        (_vkey_text().replace(NAME, NAME + "x", 1), "id does not match its name and key"),
    ],
)
def test_malformed_verifier_keys_are_refused(text: str, message: str) -> None:
    """A key that is not name+8 hex digits+base64 of 0x01 and 32 bytes, or whose id is not its own."""
    with pytest.raises(NoteError, match=message):
        VerifierKey.parse(text)


ROOT = bytes(range(32))


def test_a_checkpoint_is_origin_size_and_base64_root_each_on_a_line() -> None:
    """format_checkpoint writes the origin, the decimal size and the base64 root, then any extensions."""
    checkpoint = Checkpoint("example.com/log", 17, ROOT, ("ext one", "ext two"))
    text = format_checkpoint(checkpoint)
    assert text == f"example.com/log\n17\n{base64.b64encode(ROOT).decode()}\next one\next two\n"
    assert parse_checkpoint(text) == checkpoint
    assert parse_checkpoint(format_checkpoint(Checkpoint("o", 0, ROOT))) == Checkpoint("o", 0, ROOT)


@given(
    origin=st.text(st.characters(min_codepoint=0x20, exclude_categories=["Cs"]), min_size=1),
    size=st.integers(min_value=0, max_value=2**63 - 1),
    root=st.binary(min_size=32, max_size=32),
    extensions=st.lists(st.text(st.characters(min_codepoint=0x20, exclude_categories=["Cs"]), min_size=1)),
)
def test_any_checkpoint_round_trips_through_a_signed_note(
    origin: str, size: int, root: bytes, extensions: list[str]
) -> None:
    """format, sign, open, parse gives back the checkpoint."""
    checkpoint = Checkpoint(origin, size, root, tuple(extensions))
    text, _ = open_note(sign_note(format_checkpoint(checkpoint), NAME, KEY), [verifier_key(NAME, KEY)])
    assert parse_checkpoint(text) == checkpoint


B64_ROOT = base64.b64encode(ROOT).decode()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"o\n1\n{B64_ROOT}", "does not end with a newline"),
        ("o\n1\n", "no origin, size and root"),
        (f"\n1\n{B64_ROOT}\n", "no origin, size and root"),
        (f"o\n01\n{B64_ROOT}\n", "size is not a decimal number"),
        (f"o\n-1\n{B64_ROOT}\n", "size is not a decimal number"),
        (f"o\n+1\n{B64_ROOT}\n", "size is not a decimal number"),
        (f"o\n 1\n{B64_ROOT}\n", "size is not a decimal number"),
        (f"o\n1e3\n{B64_ROOT}\n", "size is not a decimal number"),
        (f"o\n\u0661\n{B64_ROOT}\n", "size is not a decimal number"),
        (f"o\n{2**63}\n{B64_ROOT}\n", "size is not a decimal number"),
        (f"o\n\n{B64_ROOT}\n", "size is not a decimal number"),
        ("o\n1\nnot base64!\n", "checkpoint root is not base64"),
        (f"o\n1\n{B64_ROOT[:-4]}\n", "checkpoint root is not a SHA-256 hash"),
        (f"o\n1\n{base64.b64encode(ROOT + b'x').decode()}\n", "checkpoint root is not a SHA-256 hash"),
        (f"o\n1\n{B64_ROOT}\n\n", "checkpoint has an empty line"),
        (f"o\n1\n{B64_ROOT}\next\n\nmore\n", "checkpoint has an empty line"),
    ],
)
def test_malformed_checkpoints_are_refused(text: str, message: str) -> None:
    """A body that is not origin, canonical decimal size below 2**63, base64 SHA-256 root, extensions."""
    with pytest.raises(NoteError, match=message):
        parse_checkpoint(text)


def test_the_largest_size_parses() -> None:
    """2**63 - 1, the largest size Go's int64 holds, is a size."""
    assert parse_checkpoint(f"o\n{2**63 - 1}\n{B64_ROOT}\n").size == 2**63 - 1


@pytest.mark.parametrize(
    "checkpoint",
    [
        Checkpoint("", 1, ROOT),
        Checkpoint("a\nb", 1, ROOT),
        Checkpoint("o", 1, ROOT, ("",)),
        Checkpoint("o", 1, ROOT, ("a\nb",)),
    ],
)
def test_format_checkpoint_refuses_empty_lines_and_newlines(checkpoint: Checkpoint) -> None:
    """An empty origin or extension, or one holding a newline, cannot be written."""
    with pytest.raises(NoteError, match="checkpoint lines are not empty and hold no newline"):
        format_checkpoint(checkpoint)


def test_signatures_are_ed25519_over_the_text_bytes() -> None:
    """The signature verifies with the raw public key over the UTF-8 text, and over nothing else."""
    text = "h\u00e9llo \U0001f600\n"
    raw = base64.b64decode(sign_note(text, NAME, KEY).rsplit(" ", 1)[1])
    public = Ed25519PublicKey.from_public_bytes(_public(KEY))
    public.verify(raw[4:], text.encode("utf-8"))
    with pytest.raises(InvalidSignature):
        public.verify(raw[4:], text.encode("utf-8") + b"\n")


def test_a_control_character_anywhere_in_a_note_is_malformed() -> None:
    """As Go's note.Open: a control character other than newline in a signature line, even an
    unknown signer's, makes the whole note malformed."""
    note = sign_note(TEXT, NAME, KEY) + "\u2014 odd\x01name " + base64.b64encode(b"\x00" * 68).decode() + "\n"
    with pytest.raises(NoteError, match="no other control character"):
        open_note(note, [verifier_key(NAME, KEY)])


@pytest.mark.parametrize("name", ["a\x01b", "a\x7fb\x00", "\x1b[31m"])
def test_a_key_name_with_a_control_character_is_refused(name: str) -> None:
    """A name with a control character could sign no note Go opens: no key, note or parse takes it."""
    with pytest.raises(NoteError, match="holds no space, '\\+' or control character"):
        verifier_key(name, KEY)
    with pytest.raises(NoteError, match="holds no space, '\\+' or control character"):
        sign_note(TEXT, name, KEY)
    with pytest.raises(NoteError, match="not name\\+keyid\\+base64"):
        VerifierKey.parse(_vkey_text(name=name))


def test_a_text_that_is_not_unicode_text_is_refused() -> None:
    """A lone surrogate has no UTF-8 form: signing or opening such a text is a NoteError."""
    with pytest.raises(NoteError, match="UTF-8"):
        sign_note("a\ud800b\n", NAME, KEY)
    note = "a\ud800b\n\n" + SIGNATURE
    with pytest.raises(NoteError, match="UTF-8"):
        open_note(note, [verifier_key(NAME, KEY)])
