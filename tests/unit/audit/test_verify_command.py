"""``python -m keelgate.audit.verify``: run as an auditor runs it, in its own process.

The command is never imported here: ``keelgate.audit.verify`` is the chain verifier, a
function, and importing the command's module would put the module in its place.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import keelgate.audit
from tests.unit.audit.bundle_log import CASES, ORIGIN, Case, dumps, mixed_log

ROOT = Path(__file__).resolve().parents[3]
COMMAND = "keelgate.audit.verify"
SITE_MODULES = (
    "django",
    "sitekit",
    "tenants",
    "audit",
    "runs",
    "approvals",
    "notifications",
    "keelgate_site",
)
"""Django and the site's apps (``audit`` is the site's app, not ``keelgate.audit``)."""


def _env() -> dict[str, str]:
    """The engine on the path and nothing of the site: no settings module, no database."""
    return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "LC_ALL": "C.UTF-8"}


def run(tmp_path: Path, bundle, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """The command on ``bundle`` (an object, or the file's text) written to a file, or on stdin."""
    path = tmp_path / "bundle.json"
    path.write_text(bundle if isinstance(bundle, str) else dumps(bundle), encoding="utf-8")
    target = "-" if stdin is not None else str(path)
    done = subprocess.run(
        [sys.executable, "-m", COMMAND, target, *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=tmp_path,
        env=_env(),
        timeout=60,
        check=False,
    )
    return done


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_good_bundle_prints_one_line_and_exits_0(tmp_path):
    """The whole log: one ``ok`` line; a note that the key was the bundle's own, not pinned."""
    log = mixed_log()
    done = run(tmp_path, log.bundle())
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"ok: 12 events (seq 1..12) in checkpoint of size 12 signed by {ORIGIN} {log.vkey.key_id.hex()}\n"
    )
    assert "pass --vkey with the key you trust" in done.stderr


def test_a_pinned_key_as_text_or_file_and_a_single_event(tmp_path):
    """--vkey takes the key or a file holding it; one event is ``1 event``; nothing on stderr."""
    log = mixed_log()
    for vkey in (str(log.vkey), _file(tmp_path, "acme.vkey", f"{log.vkey}\n")):
        done = run(tmp_path, log.bundle(7, 7), "--vkey", vkey)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ok: 1 event (seq 7..7) in checkpoint of size 12 signed by")
        assert done.stderr == ""


def test_a_consistent_previous_checkpoint_is_named(tmp_path):
    """--previous of an older size the bundle's consistency proof covers: ``consistent with``."""
    log = mixed_log()
    previous = _file(tmp_path, "kept.checkpoint", log.note(6))
    done = run(tmp_path, log.bundle(8, 12, consistency_from=[6]), "--previous", previous)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(
        f"signed by {ORIGIN} {log.vkey.key_id.hex()}, consistent with the checkpoint of size 6"
    )


def test_witness_keys_check_the_checkpoints_cosignatures_and_name_each_that_failed(tmp_path):
    """--witness-key (repeatable): each witness's cosignature/v1 on the bundle's checkpoint
    must verify; the ok line names them; a missing one and a forged one are both named, exit 1."""
    log = mixed_log()
    w1, w2, w3 = (Ed25519PrivateKey.from_private_bytes(bytes([n]) * 32) for n in (11, 12, 13))
    k1, k2, k3 = (keelgate.audit.cosigner_key(f"w{n}.example", key) for n, key in ((1, w1), (2, w2), (3, w3)))
    bundle = log.bundle()
    text = bundle["checkpoint"][: bundle["checkpoint"].rindex("\n\n") + 1]
    forged = keelgate.audit.cosign(text, "w2.example", w3, 1700000000).rstrip("\n")  # w2's name, w3's key
    raw = keelgate.audit.cosign(text, "w1.example", w1, 1700000000)
    good = {**bundle, "checkpoint": bundle["checkpoint"] + raw}
    done = run(tmp_path, good, "--vkey", str(log.vkey), "--witness-key", str(k1))
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"cosigned by w1.example {k1.key_id.hex()} at 1700000000")
    forged_line = forged.replace(forged.split(" ")[2], _with_id(forged.split(" ")[2], k2.key_id))
    bad = {**bundle, "checkpoint": bundle["checkpoint"] + raw + forged_line + "\n"}
    done = run(tmp_path, bad, "--witness-key", str(k1), "--witness-key", str(k2), "--witness-key", str(k3))
    assert done.returncode == 1 and done.stdout == ""
    assert "[cosignature]" in done.stderr and "w1.example" not in done.stderr
    assert f"w2.example {k2.key_id.hex()}: cosignature by w2.example does not verify" in done.stderr
    assert f"w3.example {k3.key_id.hex()}: no cosignature by this witness" in done.stderr
    unusable = run(tmp_path, good, "--witness-key", str(log.vkey))
    assert unusable.returncode == 2 and "--witness-key" in unusable.stderr


def _with_id(b64: str, key_id: bytes) -> str:
    import base64

    return base64.b64encode(key_id + base64.b64decode(b64)[4:]).decode()


def test_standard_input(tmp_path):
    """``-`` reads the bundle from standard input."""
    log = mixed_log()
    done = run(tmp_path, "", stdin=dumps(log.bundle(2, 3)).encode())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: 2 events (seq 2..3)")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_bad_bundle_exits_1_naming_it(tmp_path, case: Case):
    """Each bad bundle: exit 1, nothing on stdout, ``FAIL: <why>`` and its reason code on stderr."""
    log = mixed_log()
    args = []
    if case.vkey is not None:
        args += ["--vkey", case.vkey(log)]
    if case.previous is not None:
        args += ["--previous", _file(tmp_path, "kept.checkpoint", case.previous(log))]
    done = run(tmp_path, case.make(log), *args)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("FAIL: ")
    assert case.message in line
    assert line.endswith(f" [{case.reason}]")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.json"], "error: cannot read missing.json: No such file or directory"),
        (["bundle.json", "--previous", "nowhere"], "error: cannot read nowhere: No such file or directory"),
        (["bundle.json", "--vkey", "acme+00+AAAA"], "error: --vkey: verifier key is not name+keyid+base64"),
        ([], "usage: python -m keelgate.audit.verify"),
        (["bundle.json", "--colour"], "unrecognized arguments: --colour"),
    ],
)
def test_unreadable_input_exits_2(tmp_path, args, message):
    """A file that cannot be read or an argument that is not one: exit 2, not a verdict."""
    (tmp_path / "bundle.json").write_text(dumps(mixed_log().bundle()), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", COMMAND, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert message in done.stderr


def test_the_command_needs_nothing_of_django_or_the_site(tmp_path):
    """With Django installed but no settings, the command verifies and loads no module of the site."""
    log = mixed_log()
    path = _file(tmp_path, "bundle.json", dumps(log.bundle()))
    script = textwrap.dedent(
        f"""
        import importlib.util, json, os, runpy, sys
        assert importlib.util.find_spec("django") is not None  # the project's site packages
        assert "DJANGO_SETTINGS_MODULE" not in os.environ
        sys.argv = ["verify", {path!r}, "--vkey", {str(log.vkey)!r}]
        try:
            runpy.run_module({COMMAND!r}, run_name="__main__", alter_sys=True)
        except SystemExit as done:
            code = done.code
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {SITE_MODULES!r})
        print(json.dumps({{"code": code, "site": loaded}}), file=sys.stderr)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=_env(), check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: 12 events")
    assert json.loads(done.stderr.splitlines()[-1]) == {"code": 0, "site": []}


def test_the_command_runs_isolated_with_django_unimportable(tmp_path):
    """``-E -s -P`` (no environment, user site or current folder on the path), the engine's folder
    put on the path by hand and every site package made unimportable: it still verifies."""
    log = mixed_log()
    path = _file(tmp_path, "bundle.json", dumps(log.bundle(3, 9)))
    script = textwrap.dedent(
        f"""
        import runpy, sys
        for name in {SITE_MODULES!r}:
            sys.modules[name] = None  # any import of it now raises ImportError
        sys.path.insert(0, {str(ROOT)!r})
        sys.argv = ["verify", {path!r}]
        runpy.run_module({COMMAND!r}, run_name="__main__", alter_sys=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-E", "-s", "-P", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "")},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: 7 events (seq 3..9) in checkpoint of size 12")


def test_running_the_command_in_process_leaves_keelgate_audit_verify_the_function(
    tmp_path, monkeypatch, capsys
):
    """``python -m`` runs the command without importing its module under its name: afterwards
    ``keelgate.audit.verify`` is still the chain verifier, and no module of that name is loaded."""
    path = _file(tmp_path, "bundle.json", dumps(mixed_log().bundle(1, 2)))
    monkeypatch.setattr(sys, "argv", ["verify", path])
    monkeypatch.setattr(keelgate.audit, "verify", keelgate.audit.verify)  # put back even if this fails
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_module(COMMAND, run_name="__main__")
    finally:
        loaded = sys.modules.pop(COMMAND, None)
    assert loaded is None
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("ok: 2 events (seq 1..2)")
    assert callable(keelgate.audit.verify)
    assert not isinstance(keelgate.audit.verify, type(keelgate))  # a function, not a module
    assert keelgate.audit.verify.__module__ == "keelgate.audit._verify"


def test_the_how_to_shows_the_lines_the_command_prints(tmp_path):
    """The how-to's ``ok`` and ``FAIL`` lines are the command's, but for names and numbers."""
    import re

    def shape(line: str) -> str:
        return re.sub(r"\d+", "N", re.sub(r"signed by \S+ [0-9a-f]{8}", "signed by KEY", line.strip()))

    page = (ROOT / "docs" / "how-to" / "audit-verify.md").read_text(encoding="utf-8")
    shown = re.findall(r"^ok: .*$", page, re.MULTILINE) + re.findall(r"`(FAIL: seq \d+: [^`]+)`", page)
    log = mixed_log()
    kept = _file(tmp_path, "kept.checkpoint", log.note(6))
    swapped = log.bundle()
    swapped["events"][7], swapped["events"][9] = swapped["events"][9], swapped["events"][7]
    cosigned = log.bundle()
    text = cosigned["checkpoint"][: cosigned["checkpoint"].rindex("\n\n") + 1]
    witnesses = []
    for n in (1, 2):
        key = Ed25519PrivateKey.from_private_bytes(bytes([20 + n]) * 32)
        cosigned["checkpoint"] += keelgate.audit.cosign(text, f"w{n}.example", key, 1767225600 + n)
        witnesses += ["--witness-key", str(keelgate.audit.cosigner_key(f"w{n}.example", key))]
    printed = [
        run(tmp_path, log.bundle()).stdout,
        run(tmp_path, log.bundle(8, 12, consistency_from=[6]), "--previous", kept).stdout,
        run(tmp_path, swapped).stderr,
        run(tmp_path, cosigned, *witnesses).stdout,
    ]
    assert sorted(map(shape, shown)) == sorted(map(shape, printed))
