"""Go's reference check of a signed checkpoint and its proofs (:func:`go_check`), and of a
log served as C2SP ``tlog-tiles`` (:func:`go_tiles`).

``tlogcheck/main.go`` opens the note with ``golang.org/x/mod/sumdb/note`` and checks every
proof with ``sumdb/tlog`` (``CheckRecord``, ``CheckTree``): the code the Go checksum
database and every ``go`` command run, so what it accepts is what any RFC 6962 / C2SP
client accepts. ``tlogtiles/main.go`` fetches a tenant's checkpoint, tiles and entry
bundles over HTTP and checks them with ``tlog.TileHashReader``, ``ProveRecord`` and
``RecordHash``. Each is built once per process from Debian's ``golang-go`` and
``golang-golang-x-mod-dev``, offline (``GOPATH=/usr/share/gocode GO111MODULE=off``), into a
temporary folder; only their sources are in the repository.

Without them, :func:`require_go` skips the calling test, and fails it when ``CI=true``
(``.ci/run`` installs both). Used by ``tests/integration/test_go_reference.py`` on the
engine's proofs; a site test can hand it what the product's API serves.

``tlogwitness/main.go`` is a C2SP ``tlog-witness`` on the same libraries, built the same
way (:func:`tlogwitness`; :class:`GoWitness` runs one): the far side of the site's witness
client, judged by Go's ``note.Open`` and ``tlog.CheckTree``.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

GOPATH = Path("/usr/share/gocode")
"""Where Debian's golang-*-dev packages put Go sources (golang.org/x/mod among them)."""
X_MOD = GOPATH / "src" / "golang.org" / "x" / "mod" / "sumdb"
HERE = Path(__file__).resolve().parent


def require_go() -> None:
    """Skip the calling test unless Go and x/mod's sources are installed; fail instead when CI=true."""
    missing = [
        what
        for what, present in [
            ("the go command (Debian's golang-go)", shutil.which("go") is not None),
            (f"golang.org/x/mod's sources in {X_MOD} (golang-golang-x-mod-dev)", X_MOD.is_dir()),
        ]
        if not present
    ]
    if missing:
        message = f"Go's reference check needs {' and '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: required when CI=true")
        pytest.skip(message)


def tlogcheck() -> Path:
    """The built checker, compiled on the first call of this process (skips or fails without Go)."""
    return _built("tlogcheck")


def tlogwitness() -> Path:
    """The built witness, compiled on the first call of this process (skips or fails without Go)."""
    return _built("tlogwitness")


def tlogtiles() -> Path:
    """The built tiles client, compiled on the first call of this process (skips or fails without Go)."""
    return _built("tlogtiles")


@functools.cache
def _built(name: str) -> Path:
    """``<name>/main.go`` built into a temporary folder removed when the process ends."""
    require_go()
    source = HERE / name / "main.go"
    folder = Path(tempfile.mkdtemp(prefix=f"keelgate-{name}-"))
    atexit.register(shutil.rmtree, folder, True)
    env = {**os.environ, "GOPATH": str(GOPATH), "GO111MODULE": "off", "CGO_ENABLED": "0"}
    if not any(os.environ.get(var) for var in ("GOCACHE", "XDG_CACHE_HOME", "HOME")):
        env["GOCACHE"] = str(folder / "cache")  # go refuses to build with no cache folder
    binary = folder / name
    built = subprocess.run(
        ["go", "build", "-o", str(binary), str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if built.returncode != 0:
        raise RuntimeError(f"go build {source} failed:\n{built.stderr}")
    return binary


def go_check(document: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    """Run Go's check over ``document`` (see :func:`document`); exit status 0 only if all passed.

    stdout holds a line per check passed (``ok note: <origin>, size <n>, signed by <name>``,
    ``ok inclusion of leaf <i> in <n>``, ``ok consistency of <m> with <n>``); on the first
    failure, stderr holds ``FAIL <what>: <Go's error>`` and the exit status is 1.
    """
    return subprocess.run(
        [str(tlogcheck())],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


Inclusion = tuple[int, bytes, Iterable[bytes]] | tuple[int, bytes, Iterable[bytes], bytes]
"""``(index, leaf hash, hashes)``, or with the leaf's bytes, which Go then hashes itself."""


def _inclusion(
    index: int, leaf_hash: bytes, hashes: Iterable[bytes], leaf: bytes | None = None
) -> dict[str, Any]:
    entry = {"index": index, "leaf_hash": _b64(leaf_hash), "hashes": [_b64(h) for h in hashes]}
    return entry if leaf is None else {**entry, "leaf": _b64(leaf)}


def document(
    *,
    key: str,
    note: str,
    inclusion: Iterable[Inclusion] = (),
    consistency: Iterable[tuple[int, bytes, Iterable[bytes]]] = (),
    witness_keys: Iterable[str] = (),
) -> dict[str, Any]:
    """The checker's input: a verifier key (``name+id+base64``), a signed checkpoint, and proofs
    against it: ``(index, leaf hash, hashes)`` of inclusion, with the leaf's bytes fourth if Go
    should hash them too, and ``(old size, old root, hashes)`` of consistency; raw bytes.
    ``witness_keys``: cosignature/v1 keys whose cosignatures the note must carry."""
    return {
        "witness_keys": list(witness_keys),
        "key": key,
        "note": note,
        "inclusion": [_inclusion(*entry) for entry in inclusion],
        "consistency": [
            {"old_size": size, "old_root": _b64(root), "hashes": [_b64(h) for h in hashes]}
            for size, root, hashes in consistency
        ],
    }


class GoWitness:
    """The Go witness, running: ``start()`` it (again after ``stop()``: its state file keeps
    what it cosigned), read :attr:`url` and :attr:`vkey`. ``-forge`` with ``forge=True``."""

    def __init__(
        self, folder: Path, *, logs: Iterable[str], name: str = "witness.test/w1", forge: bool = False
    ) -> None:
        self.logs, self.name, self.forge = list(logs), name, forge
        self.state = folder / f"{name.replace('/', '_')}.json"
        self.log = folder / f"{name.replace('/', '_')}.log"
        """What it said on stderr: a line per checkpoint cosigned (``cosigned size N (from M)``)."""
        self.seed = base64.b64encode(bytes(range(32)) if not forge else bytes(range(1, 33))).decode()
        self.process: subprocess.Popen[str] | None = None
        self.url = self.vkey = ""

    def start(self) -> GoWitness:
        """Run the witness on a free loopback port; return once it listens."""
        args = [str(tlogwitness()), "-name", self.name, "-seed", self.seed, "-state", str(self.state)]
        args += [arg for key in self.logs for arg in ("-log", key)]
        if self.forge:
            args.append("-forge")
        with self.log.open("a") as log:
            self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.process.stdout is not None
        self.vkey = self.process.stdout.readline().removeprefix("vkey ").strip()
        self.url = self.process.stdout.readline().removeprefix("url ").strip()
        if not self.url.startswith("http://"):
            raise RuntimeError(f"the Go witness did not start ({self.process.poll()})")
        return self

    def stop(self) -> None:
        """Kill it (its state file stays)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None

    def said(self) -> str:
        """Its stderr so far."""
        return self.log.read_text() if self.log.exists() else ""

    def setting(self) -> str:
        """Its entry in ``KEELGATE_AUDIT_WITNESSES``."""
        return f"{self.url} {self.vkey}"


def go_tiles(
    prefix: str,
    *,
    vkey: str,
    authorization: str,
    records: Iterable[int] = (),
    entries_from: int = 0,
    old: tuple[int, bytes] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run Go's tiles client against the log at ``prefix`` (a URL, no trailing slash); exit
    status 0 only if every check passed.

    It opens ``<prefix>/checkpoint`` with ``vkey``, reads the tree's root from tiles, proves
    and checks each leaf of ``records`` from tiles, reads every entry bundle from the one
    holding leaf ``entries_from`` on (-1: none) and checks its records hash to the tiles'
    leaves, and, given ``old`` (an older checkpoint's size and root), proves the two trees
    consistent. ``authorization`` is sent as the ``Authorization`` header (through the
    environment, never the command line). stdout holds a line per check passed (``ok record
    <index> <base64 of the record>``, ``ok bundle <path> <count>``, ...); on the first
    failure, stderr holds ``FAIL <what>: <Go's error>``.
    """
    args = [str(tlogtiles()), "-prefix", prefix, "-vkey", vkey, "-entries-from", str(entries_from)]
    if records:
        args += ["-records", ",".join(str(r) for r in records)]
    if old is not None:
        args += ["-old", f"{old[0]}:{_b64(old[1])}"]
    return subprocess.run(
        args,
        env={**os.environ, "KEELGATE_AUTHORIZATION": authorization},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
