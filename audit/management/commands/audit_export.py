"""``manage.py audit_export``: write a tenant's events as a bundle an auditor verifies offline.

Check it with ``python -m keelgate.audit.verify FILE`` (the engine alone, no database);
``--previous`` adds the consistency proof from a checkpoint the auditor kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.exports import export_bundle
from keelgate.audit import NoteError, parse_checkpoint
from keelgate.errors import KeelgateError


class Command(BaseCommand):
    help = "Export a tenant's audit events, a signed checkpoint and their proofs as one bundle."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's id.")
        parser.add_argument(
            "--from-seq",
            type=int,
            help="The first event (default: the first the live log keeps, 1 until a retirement).",
        )
        parser.add_argument("--to-seq", type=int, help="The last event (default: the newest signed).")
        parser.add_argument(
            "--previous",
            type=Path,
            action="append",
            default=[],
            help="A checkpoint the auditor kept (its signed note): add the proof the log only grew since.",
        )
        parser.add_argument("--out", type=Path, required=True, help="Where to write the bundle (JSON).")

    def handle(self, *args: Any, **options: Any) -> None:
        sizes = [self._size(path) for path in options["previous"]]
        self.stdout.write(f"exporting tenant {options['tenant']} ...")
        try:
            bundle = export_bundle(
                options["tenant"],
                from_seq=options["from_seq"],
                to_seq=options["to_seq"],
                previous_sizes=sizes,
            )
        except KeelgateError as exc:
            raise CommandError(f"{exc.code}: {exc}") from exc
        options["out"].write_text(json.dumps(bundle, ensure_ascii=False), encoding="utf-8")
        self.stdout.write(
            f"wrote {len(bundle['events'])} events (seq {bundle['from_seq']}..{bundle['to_seq']})"
            f" to {options['out']}; verify: python -m keelgate.audit.verify {options['out']}"
        )

    def _size(self, path: Path) -> int:
        try:
            text = path.read_text(encoding="utf-8")
            return parse_checkpoint(text[: text.rfind("\n\n") + 1]).size
        except (OSError, UnicodeDecodeError, NoteError) as exc:
            raise CommandError(f"{path}: not a checkpoint ({exc})") from exc
