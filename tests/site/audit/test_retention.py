"""Retiring a tenant's oldest events (``keelgate_audit_retire``): archived to a bundle that
verifies offline, then deleted, while what remains stays provable.

The log here is ``EVENTS`` events of ``acme`` with checkpoints signed at ``EARLY`` and
``MIDDLE`` (before any retirement); ``globex`` has a log of its own, which no retirement
of ``acme`` may touch.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

import audit.retention
from audit.checkpoints import latest_checkpoint, log_verifier_key, sign_checkpoint
from audit.digest import sign_head
from audit.exports import export_bundle
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint, TreeNode
from audit.proofs import consistency, inclusion
from audit.retention import RETIRED
from audit.selectors import audit_digest, audit_verify
from audit.verification import verify_log
from audit.wiring import audit_log, integrate_pending
from keelgate.audit import (
    BundleError,
    check_consistency,
    check_inclusion,
    consistency_proof,
    open_note,
    parse_checkpoint,
    range_nodes,
)
from sitekit.errors import AuditRetiredError
from tenants.models import Membership, Role, Tenant
from tests.site.audit import child_env
from tests.site.audit.test_cut_over import cut_over, relink_from, write_legacy

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
TENANT = "acme"
OTHER = "globex"
EVENTS = 40
EARLY = 10
MIDDLE = 25


def append(tenant_id: str, count: int, start: int = 0) -> None:
    """``count`` events, numbered at once (on PostgreSQL a record only inserts; a reader numbers it)."""
    log = audit_log()
    for n in range(start, start + count):
        log.record(tenant_id, actor="op", kind="note", body={"n": n, "text": "Zoë \u2028 <b>"})
    integrate_pending([tenant_id])


def make_log() -> dict[int, Checkpoint]:
    """``acme``'s log with checkpoints at EARLY and MIDDLE, and ``globex``'s; the two kept checkpoints."""
    kept = {}
    append(TENANT, EARLY)
    kept[EARLY] = sign_checkpoint(TENANT)
    append(TENANT, MIDDLE - EARLY, start=EARLY)
    kept[MIDDLE] = sign_checkpoint(TENANT)
    append(TENANT, EVENTS - MIDDLE, start=MIDDLE)
    append(OTHER, 12)
    sign_checkpoint(OTHER)
    assert all(cp is not None for cp in kept.values())
    return kept  # type: ignore[return-value]


def retire(*args: str, archive: Path, tenant: str = TENANT) -> str:
    """Run the command with ``--yes``; its output (CommandError propagates)."""
    out = StringIO()
    call_command(
        "keelgate_audit_retire", "--tenant", tenant, *args, "--archive", str(archive), "--yes",
        "--by", "rita", stdout=out,
    )  # fmt: skip
    return out.getvalue()


def offline(bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``python -m keelgate.audit.verify`` in a process that knows nothing of Django or the database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE", "KEELGATE"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "keelgate.audit.verify", str(bundle), *extra],
        capture_output=True, text=True, env=env, cwd=str(bundle.parent), timeout=120, check=False,
    )  # fmt: skip


def seqs(tenant_id: str = TENANT) -> list[int]:
    return list(EventRow.objects.filter(tenant_id=tenant_id).order_by("seq").values_list("seq", flat=True))


def snapshot(tenant_id: str) -> tuple[Any, ...]:
    """Everything a tenant's log is made of, to compare before and after."""
    return (
        list(
            EventRow.objects.filter(tenant_id=tenant_id)
            .order_by("seq")
            .values_list("seq", "body", "leaf_hash")
        ),
        sorted(TreeNode.objects.filter(tenant_id=tenant_id).values_list("level", "index", "hash")),
        ChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", "root", "retired_below").get(),
        list(Checkpoint.objects.filter(tenant_id=tenant_id).order_by("size").values_list("size", "note")),
    )


def signed(checkpoint: Checkpoint) -> tuple[int, bytes]:
    """A stored checkpoint's size and root, read from its note as an auditor would."""
    text, _ = open_note(checkpoint.note, [log_verifier_key(checkpoint.tenant_id)])
    body = parse_checkpoint(text)
    return body.size, body.root


# -- retiring ---------------------------------------------------------------------------------


def test_a_retirement_archives_deletes_keeps_the_tree_and_records_itself(tmp_path):
    """Retire below 21: events 1..20 go, every tree node stays, the cut moves to 21, and an
    audit.retired event (range, archive name and digest, who) follows; the log verifies."""
    make_log()
    nodes_before = set(TreeNode.objects.filter(tenant_id=TENANT).values_list("level", "index", "hash"))
    other = snapshot(OTHER)
    archive = tmp_path / "acme-1.json"
    out = retire("--before-seq", "21", archive=archive)
    assert "retiring events 1..20 (20 of the 40 kept)" in out
    assert f"verified .{archive.name}." in out and "retired: the live log starts at event 21" in out
    assert seqs() == list(range(21, EVENTS + 2))
    assert nodes_before <= set(
        TreeNode.objects.filter(tenant_id=TENANT).values_list("level", "index", "hash")
    )
    head = ChainHead.objects.get(tenant_id=TENANT)
    assert (head.seq, head.retired_below) == (EVENTS + 1, 21)
    event = EventRow.objects.get(tenant_id=TENANT, seq=EVENTS + 1)
    body = json.loads(event.body)
    assert (event.kind, event.actor) == (RETIRED, "rita")
    assert body == {
        "from_seq": 1,
        "to_seq": 20,
        "archive_name": "acme-1.json",
        "archive_sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "checkpoint_size": EVENTS,
    }
    assert latest_checkpoint(TENANT).size == EVENTS + 1  # the retirement itself is signed
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.checked, report.head_seq) == (True, EVENTS + 1 - 20, EVENTS + 1)
    assert report.head_hash == head.root
    assert snapshot(OTHER) == other  # the other tenant untouched
    assert audit_verify(tenant_id=OTHER).ok
    verified = StringIO()
    call_command("verify_audit", stdout=verified)
    assert f"tenant={TENANT} events=21 head=41 ok" in verified.getvalue()


def test_the_archive_verifies_offline_and_not_with_one_byte_changed(tmp_path):
    """The archive is a bundle the engine's command accepts alone, consistent with a checkpoint
    signed long before; one byte changed in it fails, naming the event."""
    kept = make_log()
    archive = tmp_path / "acme.json"
    retire("--before-seq", "31", archive=archive)
    early = tmp_path / "early.note"
    early.write_text(kept[EARLY].note)
    done = offline(archive, "--previous", str(early), "--vkey", str(log_verifier_key(TENANT)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: 30 events (seq 1..30) in checkpoint of size {EVENTS}")
    assert f"consistent with the checkpoint of size {EARLY}" in done.stdout
    data = archive.read_bytes()
    at = data.index(b'"n": 17') + len(b'"n": 1')
    archive.write_bytes(data[:at] + b"8" + data[at + 1 :])  # event 18 now says what event 19 says
    failed = offline(archive)
    assert failed.returncode == 1 and "FAIL: seq 18:" in failed.stderr and "[leaf_mismatch]" in failed.stderr


def test_proofs_after_a_retirement_verify_against_checkpoints_signed_before_and_after(tmp_path):
    """Inclusion of every kept event checks against the newest checkpoint; consistency from
    the checkpoints signed before the retirement to it checks too; a retired event's
    inclusion is 410 audit_retired."""
    kept = make_log()
    retire("--before-seq", "21", archive=tmp_path / "a.json")
    append(TENANT, 5, start=100)
    newest = sign_checkpoint(TENANT)
    size, root = signed(newest)
    assert size == EVENTS + 6
    for row in EventRow.objects.filter(tenant_id=TENANT):
        proof = inclusion(TENANT, seq=row.seq, tree_size=size)
        check_inclusion(row.seq - 1, size, bytes.fromhex(row.leaf_hash), proof.hashes, root)
    for old in kept.values():
        old_size, old_root = signed(old)
        proof = consistency(TENANT, first=old_size, second=size)
        check_consistency(old_size, size, old_root, root, proof.hashes)
    for seq in (1, 20):
        with pytest.raises(AuditRetiredError) as refused:
            inclusion(TENANT, seq=seq, tree_size=size)
        assert refused.value.first_kept == 21 and "query.seq" in str(refused.value)


def test_exports_after_a_retirement_start_at_the_cut(tmp_path):
    """The default export starts at the first kept event and verifies offline with the
    archive's checkpoint as the previous one; an export from a retired event is 410."""
    make_log()
    archive = tmp_path / "archive.json"
    retire("--before-seq", "21", archive=archive)
    out = tmp_path / "kept.json"
    cp = tmp_path / "archive.note"
    cp.write_text(json.loads(archive.read_text())["checkpoint"])
    call_command(
        "audit_export", "--tenant", TENANT, "--previous", str(cp), "--out", str(out), stdout=StringIO()
    )
    done = offline(out, "--previous", str(cp))
    assert done.returncode == 0, done.stderr
    assert "(seq 21..41)" in done.stdout and f"consistent with the checkpoint of size {EVENTS}" in done.stdout
    for args in (("--from-seq", "20"), ("--to-seq", "5")):
        with pytest.raises(CommandError, match="audit_retired"):
            call_command("audit_export", "--tenant", TENANT, *args, "--out", str(out))
    with pytest.raises(AuditRetiredError):
        export_bundle(TENANT, from_seq=1)


def test_two_retirements_in_a_row_then_every_event(tmp_path):
    """Retire below 11, then below 31, then every event: each archive verifies, the second
    carries the proof from the first's checkpoint, and the log verifies after each."""
    make_log()
    first, second, third = (tmp_path / f"{n}.json" for n in ("one", "two", "three"))
    retire("--before-seq", "11", archive=first)
    assert audit_verify(tenant_id=TENANT).ok
    append(TENANT, 3, start=200)
    retire("--before-seq", "31", archive=second)
    assert audit_verify(tenant_id=TENANT).ok
    assert json.loads(EventRow.objects.get(tenant_id=TENANT, seq=EVENTS + 5).body)["from_seq"] == 11
    one = tmp_path / "one.note"
    one.write_text(json.loads(first.read_text())["checkpoint"])
    done = offline(second, "--previous", str(one))
    assert done.returncode == 0, done.stderr
    assert "(seq 11..30)" in done.stdout and f"consistent with the checkpoint of size {EVENTS}" in done.stdout
    head = ChainHead.objects.get(tenant_id=TENANT).seq
    retire("--before-seq", str(head + 1), archive=third)  # every event, both retirements' included
    assert seqs() == [head + 1] and EventRow.objects.get(tenant_id=TENANT, seq=head + 1).kind == RETIRED
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.checked, report.head_seq) == (True, 1, head + 1)
    assert offline(third).returncode == 0
    with pytest.raises(AuditRetiredError):
        inclusion(TENANT, seq=head)


def test_older_than_days_retires_only_what_is_older(tmp_path):
    """--older-than-days 183 retires the events written more than 183 days ago, and stops at
    the first newer one, even if an older one follows it (a clock that stepped back)."""

    class Clock:
        at = datetime.now(UTC) - timedelta(days=200)

        def now(self) -> datetime:
            return self.at

        def monotonic(self) -> float:
            return 0.0

    clock = Clock()
    log = audit_log(clock=clock)
    for n in range(6):
        log.append(TENANT, actor="op", kind="note", body={"n": n})
    clock.at = datetime.now(UTC) - timedelta(days=10)
    log.append(TENANT, actor="op", kind="note", body={"n": 6})
    clock.at = datetime.now(UTC) - timedelta(days=300)
    log.append(TENANT, actor="op", kind="note", body={"n": 7})
    retire("--older-than-days", "183", archive=tmp_path / "old.json")
    assert seqs() == [7, 8, 9]
    assert json.loads(EventRow.objects.get(tenant_id=TENANT, seq=9).body)["older_than_days"] == 183
    assert "nothing to retire" in retire("--older-than-days", "183", archive=tmp_path / "again.json")
    assert not (tmp_path / "again.json").exists()
    assert audit_verify(tenant_id=TENANT).ok


# -- refusals: nothing deleted ------------------------------------------------------------------


@pytest.mark.parametrize(
    "how",
    [
        "a byte changed",
        "the disk refused",
        "the folder refused",
        "the engine refused",
        "another origin's key",
    ],
)
def test_an_archive_that_fails_or_does_not_verify_deletes_nothing(tmp_path, monkeypatch, how):
    """Whatever goes wrong with the archive (written wrong, not written, not verifying), the
    command fails naming why, no archive is left, and the log is exactly as it was."""
    make_log()
    before = snapshot(TENANT)
    if how == "a byte changed":
        real = audit.retention._encode
        monkeypatch.setattr(
            audit.retention, "_encode", lambda bundle: real(bundle).replace(b'"n": 3,', b'"n": 4,')
        )
    elif how == "the disk refused":

        def full(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(audit.retention.os, "fsync", full)
    elif how == "the folder refused":  # the archive was in place, its folder's entry not durable
        real_fsync, calls = os.fsync, []

        def second_fails(fd: int) -> None:
            calls.append(fd)
            if len(calls) == 2:
                raise OSError(5, "Input/output error")
            real_fsync(fd)

        monkeypatch.setattr(audit.retention.os, "fsync", second_fails)
    elif how == "the engine refused":

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise BundleError("root_mismatch", "failpoint")

        monkeypatch.setattr(audit.retention, "verify_bundle", refuse)
    else:
        other = log_verifier_key(OTHER)
        monkeypatch.setattr(audit.retention, "log_verifier_key", lambda tenant_id: other)
    archive = tmp_path / "acme.json"
    with pytest.raises(CommandError, match="audit_retirement_refused") as refused:
        retire("--before-seq", "21", archive=archive)
    assert "nothing was deleted" in str(refused.value)
    assert list(tmp_path.iterdir()) == []
    assert snapshot(TENANT)[:3] == before[:3]  # a checkpoint may have been signed; nothing else
    assert not EventRow.objects.filter(kind=RETIRED).exists()
    assert audit_verify(tenant_id=TENANT).ok


def test_a_failure_inside_the_delete_rolls_it_all_back(tmp_path, monkeypatch):
    """If recording the retirement fails after the rows were deleted, the transaction takes
    the deletion back with it (the archive, verified, stays)."""
    make_log()
    before = snapshot(TENANT)

    class Broken:
        def append(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the disk is gone")

    monkeypatch.setattr(audit.retention, "audit_log", lambda: Broken())
    with pytest.raises(RuntimeError):
        retire("--before-seq", "21", archive=tmp_path / "a.json")
    assert snapshot(TENANT)[:3] == before[:3]


def test_what_the_command_refuses(tmp_path):
    """A cut beyond the head, a tenant without events, an archive that exists (unless
    --force) or whose folder does not, no period, no confirmation: each refused, by name."""
    make_log()
    before = snapshot(TENANT)
    refusals = {
        ("--before-seq", str(EVENTS + 2)): "beyond the head",
        ("--older-than-days", "0"): "at least 1 day",
    }
    for args, says in refusals.items():
        with pytest.raises(CommandError, match=says):
            retire(*args, archive=tmp_path / "x.json")
    with pytest.raises(CommandError, match="audit_chain_empty"):
        retire("--before-seq", "2", archive=tmp_path / "x.json", tenant="nobody")
    exists = tmp_path / "exists.json"
    exists.write_text("keep me")
    with pytest.raises(CommandError, match="exists: name another file, or add --force"):
        retire("--before-seq", "5", archive=exists)
    assert exists.read_text() == "keep me"
    with pytest.raises(CommandError, match="does not exist"):
        retire("--before-seq", "5", archive=tmp_path / "no" / "such.json")
    with pytest.raises(CommandError, match="add --yes"):  # no terminal to ask on
        call_command(
            "keelgate_audit_retire", "--tenant", TENANT, "--before-seq", "5",
            "--archive", str(tmp_path / "y.json"), stdout=StringIO(),
        )  # fmt: skip
    with pytest.raises(CommandError, match="one of the arguments --before-seq --older-than-days is required"):
        call_command("keelgate_audit_retire", "--tenant", TENANT, "--archive", str(tmp_path / "z.json"))
    assert snapshot(TENANT)[:3] == before[:3]
    assert "nothing to retire" in retire("--before-seq", "1", archive=tmp_path / "none.json")
    call_command(
        "keelgate_audit_retire", "--tenant", TENANT, "--before-seq", "5", "--archive", str(exists), "--yes",
        "--force", stdout=StringIO(),
    )  # fmt: skip
    assert json.loads(exists.read_text())["to_seq"] == 4 and seqs()[0] == 5


def test_another_retirement_meanwhile_is_refused(tmp_path):
    """A plan made before another retirement moved the cut is refused in the transaction."""
    make_log()
    plan = audit.retention.retirement_plan(TENANT, before_seq=11)
    archive = audit.retention.write_archive(plan, tmp_path / "a.json", progress=lambda line: None)
    retire("--before-seq", "6", archive=tmp_path / "b.json")
    before = snapshot(TENANT)
    with pytest.raises(Exception, match="changed since it was planned"):
        audit.retention.retire(plan, archive, actor="rita")
    assert snapshot(TENANT)[:3] == before[:3]


# -- tampering after a retirement ---------------------------------------------------------------


def test_tampering_after_a_retirement_is_still_caught(tmp_path):
    """A kept row edited, a stored hash below the cut edited (one a checkpoint's proof uses,
    or the edge the walk starts from), rows deleted by hand with the cut moved to hide it,
    a retired row put back: each is a named break."""
    make_log()
    retire("--before-seq", "21", archive=tmp_path / "a.json")
    assert audit_verify(tenant_id=TENANT).ok

    def broken() -> tuple[int | None, str | None]:
        report = audit_verify(tenant_id=TENANT)
        assert not report.ok
        return report.first_bad_seq, report.reason

    EventRow.objects.filter(tenant_id=TENANT, seq=25).update(actor="mallory")
    assert broken() == (25, "leaf_mismatch")
    EventRow.objects.filter(tenant_id=TENANT, seq=25).update(actor="op")
    assert audit_verify(tenant_id=TENANT).ok

    # A stored hash under the cut that the proof from the checkpoint of size EARLY to the cut uses.
    used: list[tuple[int, int]] = []
    consistency_proof(EARLY, 20, lambda nodes: used.extend(nodes) or [bytes(32)] * len(nodes))
    (level, index) = used[0]
    node = TreeNode.objects.get(tenant_id=TENANT, level=level, index=index)
    good = bytes(node.hash)
    TreeNode.objects.filter(pk=node.pk).update(hash=b"\x00" * 32)
    assert broken() == (EARLY, "checkpoint_mismatch")
    TreeNode.objects.filter(pk=node.pk).update(hash=good)

    # The edge the walk starts from (the subtree of leaves 17..20).
    (level, index) = range_nodes(0, 20)[-1]
    edge = TreeNode.objects.get(tenant_id=TENANT, level=level, index=index)
    good = bytes(edge.hash)
    TreeNode.objects.filter(pk=edge.pk).update(hash=b"\x01" * 32)
    assert broken() == (17, "node_mismatch")  # the subtree it and leaves 21..24 complete disagrees
    TreeNode.objects.filter(pk=edge.pk).update(hash=good)
    assert audit_verify(tenant_id=TENANT).ok

    # Rows deleted by hand, the cut moved to hide it: no retirement names that cut.
    EventRow.objects.filter(tenant_id=TENANT, seq__lt=26).delete()
    ChainHead.objects.filter(tenant_id=TENANT).update(retired_below=26)
    assert broken() == (21, "retired_mismatch")


def test_a_retired_row_put_back_is_caught(tmp_path):
    """An event below the cut in the live log again (restored from a backup by hand) is a break."""
    make_log()
    row = EventRow.objects.get(tenant_id=TENANT, seq=7)
    retire("--before-seq", "21", archive=tmp_path / "a.json")
    row.pk = None
    row.save()
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.first_bad_seq, report.reason) == (False, 7, "retired_mismatch")


def test_digests_from_before_a_retirement(tmp_path):
    """A digest of a root at a retired seq still verifies from the kept hashes; one whose hash
    is not that root fails; the digest of the new head verifies."""
    make_log()
    before = dict(audit_digest(tenant_id=TENANT))  # at seq 40
    old_root = ChainHead.objects.get(tenant_id=TENANT).root
    retire("--before-seq", str(EVENTS + 1), archive=tmp_path / "all.json")
    assert audit_verify(tenant_id=TENANT, against=before).ok
    assert (
        verify_log(tenant_id=TENANT, against=dict(sign_head(TENANT, 12, old_root))).reason
        == "digest_mismatch"
    )
    assert audit_verify(tenant_id=TENANT, against=dict(audit_digest(tenant_id=TENANT))).ok


def test_a_hash_chained_log_retired_part_way(tmp_path):
    """Events written before the tree (hash-chained), retired part way: the chain is checked
    from the first kept one; an edit there, even re-linked, is caught; a digest of a retired
    chained event's hash cannot be checked here (410, the archive can)."""
    legacy = write_legacy(TENANT, [{"n": n} for n in range(8)])
    cut_over()
    append(TENANT, 3, start=8)
    chain_digest = dict(sign_head(TENANT, 3, legacy[2].hash))
    archive = tmp_path / "legacy.json"
    retire("--before-seq", "5", archive=archive)
    assert offline(archive).returncode == 0
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.checked) == (True, 8 - 4 + 3 + 1)
    with pytest.raises(AuditRetiredError):
        verify_log(tenant_id=TENANT, against=chain_digest)
    EventRow.objects.filter(tenant_id=TENANT, seq=6).update(actor="intruder")
    report = audit_verify(tenant_id=TENANT)
    assert (report.first_bad_seq, report.reason) == (6, "hash_mismatch")
    relink_from(TENANT, 6, legacy)
    assert audit_verify(tenant_id=TENANT).reason == "leaf_mismatch"

    # The whole chain retired: kept events are tree leaves only.
    EventRow.objects.filter(tenant_id=TENANT, seq=6).update(actor="agent")
    relink_from(TENANT, 6, legacy)
    assert audit_verify(tenant_id=TENANT).ok
    retire("--before-seq", "10", archive=tmp_path / "rest.json")
    assert audit_verify(tenant_id=TENANT).ok
    rest = offline(tmp_path / "rest.json")  # chained events 5..8 from the middle of the chain, then leaves
    assert rest.returncode == 0 and "(seq 5..9)" in rest.stdout, rest.stderr


# -- the console ----------------------------------------------------------------------------------


def test_the_console_after_a_retirement(operator, tmp_path):
    """A retired event's page is 410 and says so in words, naming the retirement; the log's page
    says where it starts and lists nothing below (the Decisions view too); another tenant's
    member learns nothing."""
    decided = {"run_id": "r-1", "tool": "place_order", "decision": "deny", "note": "no"}
    append("t1", 3)
    audit_log().append("t1", actor="rita", kind="approval.decided", body=decided)  # 4: to be retired
    append("t1", 10, start=4)
    audit_log().append("t1", actor="rita", kind="approval.decided", body=decided)  # 15: kept
    append("t1", 15, start=15)
    retire("--before-seq", "11", archive=tmp_path / "t1.json", tenant="t1")
    viewer = Client()
    viewer.force_login(operator.__class__.objects.get(username="viewer"))
    page = viewer.get("/audit/t1/events/4/")
    assert page.status_code == 410
    text = page.content.decode()
    assert "Event 4 of t1 was retired" in text and "Events below 11 were retired" in text
    assert "Events 1–10 retired: archived to t1.json" in text and 'href="/audit/t1/events/31/"' in text
    assert viewer.get("/audit/t1/events/11/").status_code == 200
    assert viewer.get("/audit/t1/events/99/").status_code == 404
    log = viewer.get("/audit/t1/?before=12").content.decode()
    assert 'data-first-kept="11"' in log and 'id="ev-11"' in log and 'id="ev-10"' not in log
    retired_row = viewer.get("/audit/t1/?kind=audit.retired").content.decode()
    assert 'data-kind="audit.retired"' in retired_row
    decisions = viewer.get("/audit/t1/decisions/").content.decode()
    assert 'id="ev-15"' in decisions and 'id="ev-4"' not in decisions
    verify = viewer.post("/audit/t1/verify/", follow=True).content.decode()
    assert "is intact: 21 events, head seq 31 (events below 11 retired" in verify
    stranger = get_user_model().objects.create_user("stranger", password="pw-stranger-123456")
    Membership.objects.create(user=stranger, tenant=Tenant.objects.create(slug="t9"), role=Role.ADMIN)
    outsider = Client()
    outsider.force_login(stranger)
    assert outsider.get("/audit/t1/events/4/").status_code == 404
    assert outsider.get("/audit/t1/events/11/").status_code == 404


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_real_command_exits_non_zero_when_it_refuses_and_zero_when_it_retires(tmp_path):
    """``manage.py keelgate_audit_retire`` as an operator runs it: a cut beyond the head exits 1
    saying why; a retirement exits 0 and prints its progress."""
    append(TENANT, 6)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "keelgate_audit_retire", "--tenant", TENANT, *args],
            cwd=settings.BASE_DIR, env=child_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    archive = str(tmp_path / "a.json")
    refused = run("--before-seq", "9", "--archive", archive, "--yes")
    assert refused.returncode == 1 and "beyond the head" in refused.stderr
    done = run("--before-seq", "4", "--archive", archive, "--yes")
    assert done.returncode == 0, done.stderr
    assert "retiring events 1..3" in done.stdout and "retired: the live log starts at event 4" in done.stdout
    assert seqs() == [4, 5, 6, 7]
