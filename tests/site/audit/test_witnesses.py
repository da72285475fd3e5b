"""Witnesses (``audit.witnesses``): each new checkpoint is sent to the witnesses the operator
names with C2SP ``tlog-witness`` ``add-checkpoint``, and their cosignatures are kept.

The far side is Go's: ``tests/interop/tlogwitness`` opens the checkpoint with ``sumdb/note``,
checks the consistency proof with ``sumdb/tlog``'s ``CheckTree`` against the tree it last
cosigned, answers 409 with its size to a stale ``old``, and cosigns with ``cosignature/v1``.
"""

from __future__ import annotations

import io
import logging
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils import timezone

from audit.checkpoints import cosigned_note, latest_checkpoint, log_verifier_key, sign_checkpoint
from audit.models import Checkpoint, WitnessCosignature, WitnessState
from audit.wiring import audit_log
from audit.witnesses import BACKOFF, add_checkpoint_body, configured_witnesses, serve, witness_pass
from keelgate.audit import CosignerKey, NoteError, note_cosignatures, open_note
from tests.interop.go_reference import GoWitness
from tests.site._threads import serving

pytestmark = pytest.mark.django_db(transaction=True)

TENANT = "acme"


def _append(count: int) -> int:
    """Append ``count`` events and sign a checkpoint over them; the checkpoint's size."""
    log = audit_log()
    for n in range(count):
        log.record(TENANT, actor="agent", kind="note", body={"n": n})
    checkpoint = sign_checkpoint(TENANT)
    assert checkpoint is not None
    return checkpoint.size


@pytest.fixture
def witness(tmp_path, settings):
    """The Go witness, knowing the tenant's log key, named in KEELGATE_AUDIT_WITNESSES."""
    started = GoWitness(tmp_path, logs=[str(log_verifier_key(TENANT))]).start()
    settings.KEELGATE_AUDIT_WITNESSES = [started.setting()]
    settings.KEELGATE_AUDIT_WITNESS_TIMEOUT_SECONDS = 5
    yield started
    started.stop()


def _state() -> WitnessState:
    return WitnessState.objects.get(tenant_id=TENANT)


def test_two_checkpoints_are_cosigned_the_second_from_a_consistency_proof(witness):
    """The first checkpoint goes with ``old 0``; the second with ``old`` the first's size and
    the proof from it, which Go's CheckTree accepts; each cosignature is stored with its
    checkpoint and verifies with the witness's key."""
    first = _append(3)
    assert witness_pass().cosigned == 1
    second = _append(4)
    assert witness_pass().cosigned == 1
    assert f"cosigned size {first} (from 0)" in witness.said()
    assert f"cosigned size {second} (from {first})" in witness.said()
    key = CosignerKey.parse(witness.vkey)
    for size in (first, second):
        checkpoint = Checkpoint.objects.get(tenant_id=TENANT, size=size)
        [found] = note_cosignatures(cosigned_note(checkpoint), [key])
        assert found.key == key and abs(found.timestamp - timezone.now().timestamp()) < 600
    state = _state()
    assert (state.size, state.failures, state.last_status, state.last_error) == (second, 0, 200, "")
    assert witness_pass().cosigned == 0  # nothing new: nothing sent


def test_a_409_resyncs_from_the_witness_size_with_a_new_proof(witness, caplog):
    """When the site's record of the witness is lost, it sends ``old 0``; the witness answers
    409 text/x.tlog.size with the size it cosigned, and the site asks again from there."""
    first = _append(2)
    assert witness_pass().cosigned == 1
    WitnessState.objects.all().delete()  # the site forgets what the witness cosigned
    second = _append(3)
    with caplog.at_level(logging.INFO, logger="keelgate.audit.witnesses"):
        assert witness_pass().cosigned == 1
    assert f"had cosigned size {first}" in caplog.text
    assert f"cosigned size {second} (from {first})" in witness.said()
    assert WitnessCosignature.objects.filter(checkpoint__size=second).count() == 1
    assert _state().size == second


def test_a_witness_that_is_down_is_retried_with_backoff_and_appends_go_on(witness, settings):
    """A refused connection is recorded and retried after the backoff, not before; events are
    appended and checkpoints signed all the while; once the witness is back, the newest
    checkpoint is cosigned from the size it last cosigned."""
    first = _append(2)
    assert witness_pass().cosigned == 1
    witness.stop()
    second = _append(3)
    now = timezone.now()
    assert witness_pass(now=now).failed == 1
    state = _state()
    assert state.failures == 1 and state.last_status is None and state.last_error
    assert state.due_at == now + timedelta(seconds=BACKOFF[0]) and state.size == first
    third = _append(2)  # appends and signing never wait on a witness
    assert latest_checkpoint(TENANT).size == third > second
    assert witness_pass(now=now + timedelta(seconds=1)).failed == 0  # not due yet: not asked
    assert witness_pass(now=now + timedelta(seconds=BACKOFF[0] + 1)).failed == 1
    assert _state().failures == 2
    witness.start()
    settings.KEELGATE_AUDIT_WITNESSES = [witness.setting()]
    later = now + timedelta(seconds=BACKOFF[0] + BACKOFF[1] + 2)
    assert witness_pass(now=later).cosigned == 1
    assert f"cosigned size {third} (from {first})" in witness.said()
    state = _state()
    assert (state.size, state.failures, state.last_error) == (third, 0, "")
    assert not WitnessCosignature.objects.filter(checkpoint__size=second).exists()


def test_a_forged_cosignature_is_refused_and_never_stored(tmp_path, settings, caplog):
    """A witness whose cosignature does not verify with its key: refused, logged as an error,
    recorded on the state, retried later; nothing is stored or served."""
    forger = GoWitness(tmp_path, logs=[str(log_verifier_key(TENANT))], forge=True)
    _append(2)
    forger.start()
    try:
        settings.KEELGATE_AUDIT_WITNESSES = [forger.setting()]
        with caplog.at_level(logging.WARNING, logger="keelgate.audit.witnesses"):
            assert witness_pass().failed == 1
    finally:
        forger.stop()
    assert not WitnessCosignature.objects.exists()
    state = _state()
    assert "cosignature refused" in state.last_error and state.failures == 1
    assert any(r.levelno == logging.ERROR and "does not verify" in r.getMessage() for r in caplog.records)
    checkpoint = latest_checkpoint(TENANT)
    assert cosigned_note(checkpoint) == checkpoint.note


def test_a_witness_that_does_not_know_the_log_is_recorded(tmp_path, settings):
    """404 (the origin unknown to the witness) is recorded with the status and retried later."""
    stranger = GoWitness(tmp_path, logs=[], name="witness.test/w2").start()
    try:
        settings.KEELGATE_AUDIT_WITNESSES = [stranger.setting()]
        _append(1)
        assert witness_pass().failed == 1
    finally:
        stranger.stop()
    state = _state()
    assert state.last_status == 404 and state.last_error.startswith("HTTP 404") and state.due_at


def test_the_request_body_is_old_size_proof_lines_blank_line_checkpoint():
    """C2SP tlog-witness: ``old N``, a base64 line per hash, an empty line, then the note."""
    note = "o\n2\nAAAA\n\n\u2014 o AAAA\n"
    body = add_checkpoint_body(1, [b"\x01" * 32], note)
    assert body == ("old 1\n" + "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n" + "\n" + note).encode()
    assert add_checkpoint_body(0, [], note) == ("old 0\n\n" + note).encode()


@pytest.mark.parametrize(
    "entry",
    [
        "https://w.example/",  # no key
        "ftp://w.example/ w+00000000+AAAA",  # not http(s)
        "https://w.example/ not-a-key",
    ],
)
def test_a_malformed_witness_setting_is_refused_naming_it(settings, entry):
    """Each entry is '<http(s) URL> <cosignature/v1 vkey>'; anything else stops the sequencer."""
    settings.KEELGATE_AUDIT_WITNESSES = [entry]
    with pytest.raises(ImproperlyConfigured, match="KEELGATE_AUDIT_WITNESSES"):
        configured_witnesses()


def test_the_cosigned_note_still_opens_with_the_site_key(witness):
    """The stored cosignature line is an extra signature line the site's key skips."""
    _append(2)
    witness_pass()
    checkpoint = latest_checkpoint(TENANT)
    note = cosigned_note(checkpoint)
    assert note.startswith(checkpoint.note) and note.count("\u2014 ") == 2
    text, signers = open_note(note, [log_verifier_key(TENANT)])
    assert signers == [log_verifier_key(TENANT)] and checkpoint.note.startswith(text)
    with pytest.raises(NoteError):
        open_note(note, [])


def test_the_admin_shows_each_witness_state_read_only(witness, client, django_user_model):
    """Django's admin lists the state (size, failures, last status) and offers no change."""
    _append(1)
    witness_pass()
    admin = django_user_model.objects.create_superuser("root", password="pw-root-123456")
    client.force_login(admin)
    listed = client.get("/admin/audit/witnessstate/")
    assert listed.status_code == 200 and witness.name in listed.content.decode()
    state = _state()
    assert client.get(f"/admin/audit/witnessstate/{state.pk}/delete/").status_code == 403
    assert client.post(f"/admin/audit/witnessstate/{state.pk}/change/", {"size": 0}).status_code == 403
    assert _state().size == state.size


def test_the_witness_thread_cosigns_each_new_checkpoint_until_stopped(witness):
    """``serve`` (keelgate_sequencer's witness thread) sends checkpoints as they are signed."""
    with serving(lambda stop: serve(stop, poll=0.02)):
        for count in (2, 3):
            size = _append(count)
            deadline = time.monotonic() + 30
            while not WitnessCosignature.objects.filter(checkpoint__size=size).exists():
                assert time.monotonic() < deadline, f"size {size} was not cosigned"
                time.sleep(0.02)
    assert _state().size == 5


def test_the_sequencer_command_once_also_sends_to_the_witnesses(witness):
    """``keelgate_sequencer --once`` signs, then makes one witness pass, and says so."""
    log = audit_log()
    log.record(TENANT, actor="agent", kind="note", body={"n": 1})
    out = io.StringIO()
    call_command("keelgate_sequencer", "--once", stdout=out)
    assert "signed 1 checkpoints" in out.getvalue() and "witnesses: 1 cosigned, 0 failed" in out.getvalue()
