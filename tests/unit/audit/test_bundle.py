"""Audit bundles: what build_bundle makes verifies offline, and every tampering is named."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from keelgate.audit import (
    BUNDLE_FORMAT,
    EMPTY_ROOT,
    BundleError,
    BundleReport,
    Checkpoint,
    build_bundle,
    format_checkpoint,
    sign_note,
    tree_root,
    verifier_key,
    verify_bundle,
)
from tests.unit.audit.bundle_log import CASES, ORIGIN, TENANT, Case, Log, dumps, mixed_log


def _ok(bundle, **kwargs) -> BundleReport:
    """The report, the same for the object and for its JSON text."""
    report = verify_bundle(bundle, **kwargs)
    assert verify_bundle(dumps(bundle), **kwargs) == report
    assert verify_bundle(dumps(bundle).encode(), **kwargs) == report
    return report


@pytest.mark.parametrize(
    ("from_seq", "to_seq"),
    [(1, 12), (1, 1), (12, 12), (7, 7), (3, 9), (6, 12), (1, 5), (2, 4), (5, 6)],
)
def test_a_range_of_a_mixed_log_verifies(from_seq, to_seq):
    """Any range of seq 1..5 hash-chained and 6..12 tree-only verifies and says what it checked."""
    log = mixed_log()
    report = _ok(log.bundle(from_seq, to_seq))
    assert report == BundleReport(
        TENANT, ORIGIN, from_seq, to_seq, 12, tree_root(12, log.read), log.vkey, pinned=False
    )
    assert report.events == to_seq - from_seq + 1
    assert _ok(log.bundle(from_seq, to_seq), vkey=log.vkey).pinned


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 9, 33])
def test_the_whole_log_verifies_at_every_shape_of_tree(size):
    """A whole log of v 2 leaves, at sizes that are and are not powers of two, carries no range proof."""
    log = Log().append(size)
    bundle = log.bundle()
    assert bundle["range_proof"] == []
    assert _ok(bundle).size == size


def test_a_range_under_an_older_checkpoint_verifies():
    """Events 2..4 under the checkpoint of size 6, taken before the log grew to 12."""
    log = mixed_log()
    report = _ok(log.bundle(2, 4, size=6))
    assert (report.from_seq, report.to_seq, report.size) == (2, 4, 6)


def test_a_bundle_that_stops_short_says_so_and_is_no_failure():
    """The last events left out with a proof that fits: it verifies, and the report says seq 1..9
    of a checkpoint of 12, the only sign of what was left out (the auditor compares the range)."""
    log = mixed_log()
    bundle = log.bundle(1, 9)
    assert (bundle["to_seq"], len(bundle["range_proof"])) == (9, 2)
    report = _ok(bundle)
    assert (report.from_seq, report.to_seq, report.size) == (1, 9, 12)


def test_the_bundle_is_the_documented_format():
    """Exactly the documented fields; the events are the leaf objects as stored."""
    log = mixed_log()
    bundle = log.bundle(3, 7, consistency_from=[2, 12, 0])
    assert list(bundle) == [
        "format",
        "tenant_id",
        "origin",
        "vkey",
        "checkpoint",
        "from_seq",
        "to_seq",
        "events",
        "range_proof",
        "consistency",
    ]
    assert bundle["format"] == BUNDLE_FORMAT == "keelgate-audit-bundle/1"
    assert bundle["events"] == log.leaves[2:7]
    assert bundle["vkey"] == str(log.vkey)
    assert [entry["size"] for entry in bundle["consistency"]] == [2]  # 0 and 12 need no proof
    assert json.loads(dumps(bundle)) == bundle


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_bad_bundle_is_named(case: Case):
    """Each bad bundle fails with its reason, the first bad seq where there is one, and its words."""
    log = mixed_log()
    made = case.make(log)
    with pytest.raises(BundleError) as caught:
        verify_bundle(
            made,
            vkey=None if case.vkey is None else log.vkey,
            previous=None if case.previous is None else case.previous(log),
        )
    assert (caught.value.reason, caught.value.seq) == (case.reason, case.seq)
    assert case.message in str(caught.value)


def test_one_changed_byte_anywhere_in_an_event_fails_naming_it_or_the_root():
    """Every byte of every event's JSON changed in turn: the bundle fails, at that seq or the root."""
    log = mixed_log()
    text = dumps(log.bundle()).encode()
    checked = 0
    for event in log.leaves:
        start = text.index(dumps(event).encode())
        for offset in range(start, start + len(dumps(event).encode())):
            for flip in (0x01, 0x20):
                changed = bytearray(text)
                changed[offset] ^= flip
                with pytest.raises(BundleError) as caught:
                    verify_bundle(bytes(changed))
                error = caught.value
                where = f"seq {event['seq']}, byte {offset - start} ^ {flip:#x}: {error}"
                if error.seq is None:
                    assert error.reason in ("malformed", "root_mismatch"), where
                else:
                    assert error.seq == event["seq"], where
                checked += 1
    assert checked > 12 * 2 * 100


def test_the_bundles_own_key_is_refused_when_named_for_another_log_even_if_it_signed():
    """A bundle that brings its own key gets nothing from it unless the key is named for its origin."""
    log = mixed_log()
    other = Ed25519PrivateKey.generate()
    bundle = log.bundle()
    bundle["checkpoint"] = log.note(name="elsewhere", key=other)
    bundle["vkey"] = str(verifier_key("elsewhere", other))
    with pytest.raises(BundleError) as caught:
        verify_bundle(bundle)
    assert caught.value.reason == "vkey"


def test_a_forged_bundle_passes_on_its_own_key_and_fails_on_the_pinned_one():
    """Why an auditor pins the key: a whole log re-signed by another key of the same name."""
    log = mixed_log()
    forger = Ed25519PrivateKey.generate()
    bundle = log.bundle()
    bundle["checkpoint"] = log.note(key=forger)
    bundle["vkey"] = str(verifier_key(ORIGIN, forger))
    assert verify_bundle(bundle).signer == verifier_key(ORIGIN, forger)
    with pytest.raises(BundleError) as caught:
        verify_bundle(bundle, vkey=log.vkey)
    assert caught.value.reason == "signature"


@pytest.mark.parametrize(
    ("from_seq", "to_seq", "previous", "proofs"),
    [
        (1, 12, 6, []),  # the bundle holds the kept tree's leaves: its root is recomputed
        (1, 12, 12, []),  # the same size: the same root
        (8, 12, 6, [6]),  # a later range: the bundle's consistency proof from 6
        (8, 12, 1, [1, 4]),
        (8, 12, 8, [8]),  # a power of two: the proof starts below its root
        (12, 12, 11, [11]),
        (2, 12, 5, [5]),  # from seq 2: the leaves cannot show the prefix, the proof does
    ],
)
def test_a_previous_checkpoint_of_a_prefix_is_consistent(from_seq, to_seq, previous, proofs):
    """A checkpoint kept earlier, of a tree the bundle's extends, is consistent with it."""
    log = mixed_log()
    bundle = log.bundle(from_seq, to_seq, consistency_from=proofs)
    assert _ok(bundle, previous=log.note(previous)).previous_size == previous


def test_a_previous_checkpoint_of_the_empty_tree_is_consistent():
    """The empty tree is a prefix of every tree; a kept checkpoint of size 0 with another root is not."""
    log = mixed_log()
    empty = sign_note(format_checkpoint(Checkpoint(ORIGIN, 0, EMPTY_ROOT)), ORIGIN, log.key)
    assert _ok(log.bundle(), previous=empty).previous_size == 0
    odd = sign_note(format_checkpoint(Checkpoint(ORIGIN, 0, b"\x01" * 32)), ORIGIN, log.key)
    with pytest.raises(BundleError) as caught:
        verify_bundle(log.bundle(), previous=odd)
    assert caught.value.reason == "inconsistent"


def test_a_previous_checkpoint_of_the_same_size_with_another_root_is_inconsistent():
    """Two roots for one size: the log was rewritten."""
    log = mixed_log()
    other = Log(salt="rewritten").append(12)
    other.key = log.key
    with pytest.raises(BundleError) as caught:
        verify_bundle(log.bundle(8, 12), previous=other.note())
    assert caught.value.reason == "inconsistent"
    assert "another root for size 12" in str(caught.value)


def test_a_consistency_proof_of_the_wrong_length_is_inconsistent_not_a_crash():
    """A consistency proof cut short is a failure with its reason."""
    log = mixed_log()
    bundle = log.bundle(8, 12, consistency_from=[6])
    bundle["consistency"][0]["hashes"].pop()
    with pytest.raises(BundleError) as caught:
        verify_bundle(bundle, previous=log.note(6))
    assert caught.value.reason == "inconsistent"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.pop("consistency"), "fields missing ['consistency'], unknown []"),
        (lambda b: b.update(from_seq=0), "from_seq 0 and to_seq 12 are not 1 <= a <= b"),
        (lambda b: b.update(from_seq=True), "are not 1 <= a <= b"),
        (lambda b: b.update(to_seq="12"), "are not 1 <= a <= b"),
        (lambda b: b.update(tenant_id=7), "tenant_id is not a string"),
        (lambda b: b.update(events={}), "events is not a list"),
        (lambda b: b.update(range_proof="x"), "range_proof is not a list"),
        (lambda b: b.update(consistency=[{"size": 3}]), "a consistency entry is not {size, hashes}"),
        (lambda b: b.update(consistency=[{"size": 3, "hashes": ["AAAA"]}]), "not a base64 SHA-256 hash"),
        (lambda b: b.update(events=[*b["events"], b["events"][-1]]), "13 events for seq 1..12"),
        (lambda b: b["events"].__setitem__(4, []), "the event is not a JSON object"),
    ],
)
def test_a_bundle_of_the_wrong_shape_is_refused(change, message):
    """A missing field, a range that cannot be, a wrong type, an extra event: reason ``shape``."""
    bundle = mixed_log().bundle()
    change(bundle)
    with pytest.raises(BundleError) as caught:
        verify_bundle(bundle)
    assert caught.value.reason == "shape"
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "malformed"),
        ("[]", "malformed"),
        ('{"format": NaN}', "malformed"),
        (b"\xff\xfe{", "malformed"),
        ("{}", "format"),
    ],
)
def test_text_that_is_no_bundle_is_refused(text, reason):
    """Empty, not an object, NaN, not UTF-8, no format: refused before anything is hashed."""
    with pytest.raises(BundleError) as caught:
        verify_bundle(text)
    assert caught.value.reason == reason


def test_v1_leaves_must_link_from_the_genesis_hash():
    """The first event's prev_hash is the genesis hash; a bundle starting later cannot check its link."""
    log = mixed_log()
    bundle = log.bundle()
    bundle["events"][0]["prev_hash"] = "1" * 64
    with pytest.raises(BundleError) as caught:
        verify_bundle(bundle)
    assert (caught.value.reason, caught.value.seq) == ("prev_hash_mismatch", 1)
    assert "its prev_hash is not the genesis hash" in str(caught.value)


def test_a_v1_time_not_in_its_stored_form_is_a_hash_mismatch():
    """``Z`` for ``+00:00`` reads as the same time but is not the text that was hashed."""
    log = mixed_log()
    bundle = log.bundle()
    bundle["events"][1]["at"] = bundle["events"][1]["at"].replace("+00:00", "Z")
    with pytest.raises(BundleError) as caught:
        verify_bundle(bundle)
    assert (caught.value.reason, caught.value.seq) == ("hash_mismatch", 2)


def test_build_bundle_refuses_what_could_not_verify():
    """A note the key did not sign, another origin, a gap, or a range past the checkpoint: ValueError."""
    log = mixed_log()
    common = {"tenant_id": TENANT, "origin": ORIGIN, "vkey": log.vkey, "read": log.read}
    with pytest.raises(ValueError, match="no signature by a known key"):
        build_bundle(**common, note=log.note(key=Ed25519PrivateKey.generate()), events=log.leaves)
    with pytest.raises(ValueError, match="not 'elsewhere'"):
        build_bundle(**{**common, "origin": "elsewhere"}, note=log.note(), events=log.leaves)
    with pytest.raises(ValueError, match="is not acme's seq 3"):
        build_bundle(**common, note=log.note(), events=[*log.leaves[:2], *log.leaves[3:]])
    with pytest.raises(ValueError, match="not in the checkpoint of size 6"):
        build_bundle(**common, note=log.note(6), events=log.leaves)
    with pytest.raises(ValueError, match="at least one event"):
        build_bundle(**common, note=log.note(), events=[])
    with pytest.raises(ValueError, match="no consistency proof from size 13"):
        build_bundle(**common, note=log.note(), events=log.leaves, consistency_from=[13])


def test_every_reason_raised_is_documented_in_the_error_and_the_how_to():
    """The reasons raised in the source, those BundleError's docstring lists and the how-to's table agree."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    source = (root / "keelgate" / "audit" / "_bundle.py").read_text(encoding="utf-8")
    raised = set(re.findall(r'BundleError\(\s*"([a-z_]+)"', source))
    docstring = BundleError.__doc__ or ""
    listed = set(re.findall(r"``([a-z_]+)``(?=:|,|\s+\()", docstring))  # a code, then its meaning
    page = (root / "docs" / "how-to" / "audit-verify.md").read_text(encoding="utf-8")
    section = page.split("## What a failure means")[1].split("\n## ")[0]
    first_column = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `")]
    tabled = {code for cell in first_column for code in re.findall(r"`([a-z_]+)`", cell)}
    assert len(raised) > 20
    assert raised == listed == tabled
