"""``python -m keelgate.audit.verify``: check an audit bundle offline, with the engine alone.

Kept apart from ``keelgate/audit/verify.py``, a shim: ``keelgate.audit.verify`` is the
chain verifier (a function), and importing a module of that name would replace it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from keelgate.audit._bundle import BundleError, BundleReport, verify_bundle
from keelgate.audit._note import CosignerKey, NoteError, VerifierKey

__all__ = ["main"]

USAGE_ERROR = 2
"""The exit status for a file that cannot be read or an argument that is not one."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m keelgate.audit.verify",
        description=(
            "Check an audit bundle with no database and no Django: the checkpoint's signature, "
            "every event as a leaf, the tree's root, consistency with a checkpoint kept earlier, "
            "and the cosignatures of the witnesses named. "
            "Exit 0 if it verifies, 1 naming the first bad event and why, 2 for unreadable input."
        ),
    )
    parser.add_argument("file", help="the bundle (JSON); '-' reads standard input")
    parser.add_argument(
        "--vkey",
        metavar="KEY",
        help="the verifier key you trust (name+keyid+base64), or a file holding it; "
        "overrides the bundle's own key",
    )
    parser.add_argument(
        "--previous",
        metavar="CHECKPOINT_FILE",
        help="a signed checkpoint you kept earlier: the bundle's must extend its tree",
    )
    parser.add_argument(
        "--witness-key",
        metavar="KEY",
        action="append",
        default=[],
        help="a witness's cosignature/v1 key (name+keyid+base64, signature type 0x04) or a file "
        "holding it; the checkpoint must carry a cosignature by it that verifies (repeatable)",
    )
    return parser


class _Unreadable(Exception):
    """A file or an argument the command cannot take: exit 2, not a verdict on the bundle."""


def _bytes(name: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise _Unreadable(f"cannot read {name}: {exc.strerror or exc}") from exc


def _text(name: str) -> str:
    try:
        return _bytes(name).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unreadable(f"cannot read {name}: not UTF-8 text") from exc


def _vkey(text: str) -> VerifierKey:
    try:
        return VerifierKey.parse(_text(text) if Path(text).is_file() else text)
    except NoteError as exc:
        raise _Unreadable(f"--vkey: {exc}") from exc


def _witness_key(text: str) -> CosignerKey:
    try:
        return CosignerKey.parse(_text(text) if Path(text).is_file() else text)
    except NoteError as exc:
        raise _Unreadable(f"--witness-key: {exc}") from exc


def _ok_line(report: BundleReport) -> str:
    count = f"{report.events} event{'s' if report.events != 1 else ''}"
    line = (
        f"ok: {count} (seq {report.from_seq}..{report.to_seq}) in checkpoint of size {report.size} "
        f"signed by {report.signer.name} {report.signer.key_id.hex()}"
    )
    if report.previous_size is not None:
        line += f", consistent with the checkpoint of size {report.previous_size}"
    for cosigned in report.cosignatures:
        line += f", cosigned by {cosigned.key.name} {cosigned.key.key_id.hex()} at {cosigned.timestamp}"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command on ``argv`` (the process's arguments by default); the exit status."""
    args = _parser().parse_args(argv)
    err = sys.stderr
    try:
        data = _bytes(args.file)
        previous = _text(args.previous) if args.previous else None
        vkey = _vkey(args.vkey) if args.vkey else None
        witnesses = [_witness_key(text) for text in args.witness_key]
    except _Unreadable as exc:
        print(f"error: {exc}", file=err)
        return USAGE_ERROR

    def progress(done: int) -> None:
        print(f"... {done} events checked", file=err, flush=True)

    try:
        report = verify_bundle(data, vkey=vkey, previous=previous, progress=progress, witnesses=witnesses)
    except BundleError as exc:
        print(f"FAIL: {exc} [{exc.reason}]", file=err)
        return 1
    print(_ok_line(report))
    if not report.pinned:
        print(
            "note: checked with the bundle's own key; pass --vkey with the key you trust to pin it",
            file=err,
        )
    return 0
