"""``manage.py keelgate_prune --finished-before DATE [--keep-last N] [--dry-run]``.

Removes the checkpoints of done and cancelled runs beyond their last N (``runs.services.
checkpoints_prune``); a run that can still resume and the audit chain are never touched.
Safe while workers run. Prints one line per run and a total.
"""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.services import checkpoints_prune


def _when(text: str) -> datetime:
    """``2026-11-01`` (midnight UTC) or an ISO time; a time without a zone is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"--finished-before: not a date or ISO time: {text!r}") from exc
    if len(text) <= 10:
        value = datetime.combine(value.date(), time(), UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Remove old checkpoints of finished runs, keeping the last N of each (audit events are kept)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--finished-before",
            required=True,
            type=_when,
            metavar="DATE",
            help="runs finished before this date (midnight UTC) or ISO time",
        )
        parser.add_argument(
            "--keep-last", type=int, default=1, metavar="N", help="checkpoints kept per run, the newest"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="print what would be removed, remove nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["keep_last"] < 1:
            raise CommandError("--keep-last must be at least 1: the last checkpoint is the run's state")
        dry = options["dry_run"]
        pruned = checkpoints_prune(
            finished_before=options["finished_before"], keep_last=options["keep_last"], dry_run=dry
        )
        verb = "would remove" if dry else "removed"
        for p in pruned:
            self.stdout.write(
                f"{p.tenant_id}/{p.run_id}: {verb} checkpoints {p.first_seq}-{p.last_seq}"
                f" ({p.removed}, {p.state_bytes} bytes of state)"
            )
        total = sum(p.removed for p in pruned)
        size = sum(p.state_bytes for p in pruned)
        self.stdout.write(f"{verb} {total} checkpoint(s), {size} bytes of state, from {len(pruned)} run(s)")
