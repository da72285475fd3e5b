"""Checkpoints served with their witnesses' cosignatures: GET /audit/checkpoint, the list and
the export carry a ``cosignature/v1`` line per witness that cosigned, which Go's ``note.Open``
verifies with the witness's key beside the site's, and the offline verifier with --witness-key."""

from __future__ import annotations

import pytest

from audit.checkpoints import log_verifier_key, sign_checkpoint
from audit.witnesses import witness_pass
from keelgate.audit import CosignerKey, VerifierKey, note_cosignatures, open_note, verify_bundle
from tests.interop.go_reference import GoWitness, document, go_check


@pytest.fixture
def witness(tmp_path, settings, pending):
    """The Go witness for t1's log, named in the settings."""
    started = GoWitness(tmp_path, logs=[str(log_verifier_key("t1"))]).start()
    settings.KEELGATE_AUDIT_WITNESSES = [started.setting()]
    yield started
    started.stop()


def test_the_checkpoint_endpoint_shows_the_cosignature_and_go_verifies_both(client, witness):
    """The served note is the site's signed note plus the witness's line; Go's note.Open with
    the site's verifier and a cosignature/v1 verifier for the witness accepts it, and each
    signed it; a cosignature changed by one byte is refused by Go."""
    sign_checkpoint("t1")
    assert witness_pass().cosigned == 1
    note = client.get("/audit/checkpoint").content.decode()
    vkey = client.get("/audit/key").json()["vkey"]
    text, signers = open_note(note, [VerifierKey.parse(vkey)])
    assert signers == [VerifierKey.parse(vkey)] and note.startswith(text + "\n")
    [cosigned] = note_cosignatures(note, [CosignerKey.parse(witness.vkey)])
    assert note.endswith(cosigned.line + "\n") and note.count("\n\u2014 ") == 2
    done = go_check(document(key=vkey, note=note, witness_keys=[witness.vkey]))
    assert done.returncode == 0, done.stderr
    assert f"ok cosignature by {witness.name}" in done.stdout
    assert go_check(document(key=vkey, note=note)).returncode == 0  # the site's key alone: skipped
    line = cosigned.line
    flipped = line[:-6] + ("A" if line[-6] != "A" else "B") + line[-5:]
    refused = go_check(document(key=vkey, note=note.replace(line, flipped), witness_keys=[witness.vkey]))
    assert refused.returncode == 1 and "FAIL note" in refused.stderr
    unsigned = go_check(document(key=vkey, note=note.replace(line + "\n", ""), witness_keys=[witness.vkey]))
    assert unsigned.returncode == 1 and f"no signature by {witness.name}" in unsigned.stderr


def test_the_history_and_the_export_carry_the_cosignatures(client, witness, pending):
    """Each listed checkpoint's note has its own cosignature; the exported bundle verifies
    offline with the witness's key."""
    first = sign_checkpoint("t1")
    witness_pass()
    client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
    second = sign_checkpoint("t1")
    witness_pass()
    key = CosignerKey.parse(witness.vkey)
    items = client.get("/audit/checkpoints").json()["items"]
    assert [item["size"] for item in items] == [second.size, first.size]
    for item in items:
        [found] = note_cosignatures(item["note"], [key])
        assert found.key == key
    bundle = client.get("/audit/export").json()
    report = verify_bundle(bundle, vkey=log_verifier_key("t1"), witnesses=[key])
    assert [c.key for c in report.cosignatures] == [key]


def test_the_console_checkpoints_page_names_the_witness_as_a_signer(operator, witness):
    """The Checkpoints page's "Signed by" lists the site's key and the witness that cosigned."""
    from django.test import Client

    checkpoint = sign_checkpoint("t1")
    witness_pass()
    browser = Client()
    browser.force_login(operator)
    page = browser.get("/audit/t1/checkpoints/").content.decode()
    row = page[page.index(f'id="cp-{checkpoint.size}"') :]
    row = row[: row.index("</tr>")]
    assert f"{log_verifier_key('t1').name}, {witness.name}" in row
