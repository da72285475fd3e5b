"""Export bundles from the product, verified offline by the engine's command alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.checkpoints import sign_checkpoint
from audit.models import AuditEvent as EventRow
from audit.wiring import audit_log

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]


def _append(tenant: str, count: int, start: int = 0) -> None:
    log = audit_log()
    for n in range(start, start + count):
        log.record(tenant, actor="op", kind="note", body={"n": n, "text": 'Zoë — \u2028 "q"'})


def _verify(bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The offline command, in a process that knows nothing of Django or the database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE", "KEELGATE"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "keelgate.audit.verify", str(bundle), *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(bundle.parent),
        timeout=120,
        check=False,
    )


def test_an_exported_bundle_verifies_offline_and_a_changed_byte_does_not(tmp_path):
    """audit_export writes a bundle the engine's command accepts; one changed byte fails naming
    the event, through the leaf hashes the bundle states (the signed root vouches for them)."""
    _append("acme", 40)
    out = tmp_path / "acme.json"
    call_command("audit_export", "--tenant", "acme", "--out", str(out))
    done = _verify(out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: 40 events (seq 1..40) in checkpoint of size 40")
    bundle = json.loads(out.read_text())
    bundle["events"][6]["body"]["n"] = 7  # seq 7 now claims what seq 8 says
    out.write_text(json.dumps(bundle))
    failed = _verify(out)
    assert failed.returncode == 1
    assert "FAIL: seq 7: the event is not the leaf the signed tree holds" in failed.stderr
    assert "[leaf_mismatch]" in failed.stderr


def test_a_range_and_a_kept_checkpoint(tmp_path):
    """A middle range verifies under the newest checkpoint; a kept older one is consistent with it."""
    _append("acme", 10)
    kept = sign_checkpoint("acme")
    assert kept is not None and kept.size == 10
    old = tmp_path / "kept.note"
    old.write_text(kept.note)
    _append("acme", 25, start=10)
    out = tmp_path / "range.json"
    call_command(
        "audit_export", "--tenant", "acme", "--from-seq", "12", "--to-seq", "30", "--previous", str(old),
        "--out", str(out),
    )  # fmt: skip
    done = _verify(out, "--previous", str(old))
    assert done.returncode == 0, done.stderr
    assert "(seq 12..30) in checkpoint of size 35" in done.stdout
    assert "consistent with the checkpoint of size 10" in done.stdout


def test_a_rewritten_log_is_caught_with_the_kept_checkpoint(tmp_path):
    """Rewrite the log behind the site's back and export again: the kept checkpoint catches it."""
    _append("acme", 12)
    kept = sign_checkpoint("acme")
    old = tmp_path / "kept.note"
    old.write_text(kept.note)
    # A rewrite a forger with the database could do: drop the log and write another history.
    EventRow.objects.filter(tenant_id="acme").delete()
    from audit.models import ChainHead, Checkpoint, TreeNode

    ChainHead.objects.filter(tenant_id="acme").delete()
    TreeNode.objects.filter(tenant_id="acme").delete()
    Checkpoint.objects.filter(tenant_id="acme").delete()
    _append("acme", 14, start=100)
    out = tmp_path / "rewritten.json"
    call_command("audit_export", "--tenant", "acme", "--out", str(out))
    assert _verify(out).returncode == 0  # alone, a consistent new history passes
    failed = _verify(out, "--previous", str(old))
    assert failed.returncode == 1 and "FAIL" in failed.stderr


def test_exporting_nothing_or_out_of_range_is_a_clear_error(tmp_path):
    """No events: audit_chain_empty. A range beyond the log: proof_out_of_range naming it."""
    with pytest.raises(CommandError, match="audit_chain_empty"):
        call_command("audit_export", "--tenant", "nobody", "--out", str(tmp_path / "x.json"))
    _append("acme", 3)
    with pytest.raises(CommandError, match="to_seq"):
        call_command("audit_export", "--tenant", "acme", "--to-seq", "9", "--out", str(tmp_path / "x.json"))
    with pytest.raises(CommandError, match="from_seq"):
        call_command("audit_export", "--tenant", "acme", "--from-seq", "4", "--out", str(tmp_path / "x.json"))


def test_the_consoles_export_is_for_admins_and_verifies(operator, tmp_path):
    """The audit page's Export: a download admins get, which the offline command accepts;
    a viewer is refused."""
    from django.test import Client

    _append("t1", 5)
    admin, viewer = Client(), Client()
    admin.force_login(operator)
    from django.contrib.auth import get_user_model

    viewer.force_login(get_user_model().objects.get(username="viewer"))
    page = admin.get("/audit/t1/").content.decode()
    assert 'href="/audit/t1/export/"' in page
    assert 'href="/audit/t1/export/"' not in viewer.get("/audit/t1/").content.decode()
    response = admin.get("/audit/t1/export/")
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    out = tmp_path / "t1.json"
    out.write_bytes(response.content)
    assert _verify(out).returncode == 0
    assert viewer.get("/audit/t1/export/").status_code in (403, 404)


def test_a_bundle_of_every_kind_verifies_offline_with_each_kind_as_written(tmp_path):
    """One event of every listed kind (identity's member.*, api_key.* and auth.* among them) in a
    bundle: the offline command accepts it, and each event's kind and body are as written."""
    from audit.kinds import EVENT_KINDS
    from tests.site.audit.every_kind import BODIES, append_every_kind

    append_every_kind("acme")
    out = tmp_path / "acme.json"
    call_command("audit_export", "--tenant", "acme", "--out", str(out))
    done = _verify(out)
    assert done.returncode == 0, done.stderr
    events = json.loads(out.read_text())["events"]
    assert [e["kind"] for e in events] == list(BODIES) and set(BODIES) == set(EVENT_KINDS)
    assert all(e["body"] == BODIES[e["kind"]] for e in events)
