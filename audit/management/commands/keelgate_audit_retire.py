"""``manage.py keelgate_audit_retire``: retire a tenant's oldest audit events to a verified archive.

The work is :func:`audit.retention.audit_retire`; this parses, asks, and prints.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.retention import Plan, audit_retire
from keelgate.errors import KeelgateError


class Command(BaseCommand):
    help = (
        "Retire a tenant's audit events below a cut after their retention period: archive them to an "
        "export bundle, verify it, then delete them from the live log in one transaction, keeping the "
        "tree's hashes (proofs and consistency with older checkpoints still verify) and recording the "
        "retirement as an audit.retired event. Nothing is deleted unless the archive verified. "
        "Exits non-zero, saying why, when it refuses."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's id.")
        cut = parser.add_mutually_exclusive_group(required=True)
        cut.add_argument(
            "--before-seq",
            type=int,
            metavar="N",
            help="Retire the events numbered below N (N is the first kept).",
        )
        cut.add_argument(
            "--older-than-days",
            type=int,
            metavar="D",
            help="Retire the events written more than D days ago (183: about six months).",
        )
        parser.add_argument(
            "--archive", type=Path, required=True, help="The archive file to write (an export bundle, JSON)."
        )
        parser.add_argument("--force", action="store_true", help="Overwrite the archive file if it exists.")
        parser.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        parser.add_argument(
            "--by",
            default=None,
            help="Who retires, recorded as the audit.retired event's actor (default: the OS user).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        def progress(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        def confirm(plan: Plan) -> bool:
            if options["yes"]:
                return True
            if not sys.stdin.isatty():
                raise CommandError("not confirmed: add --yes to retire without a prompt")
            answer = input(
                f"Retire events {plan.from_seq}..{plan.to_seq} of {plan.tenant_id}? Type 'retire': "
            )
            return answer.strip() == "retire"

        try:
            audit_retire(
                options["tenant"],
                archive=options["archive"],
                actor=options["by"] or getpass.getuser(),
                before_seq=options["before_seq"],
                older_than_days=options["older_than_days"],
                force=options["force"],
                confirm=confirm,
                progress=progress,
            )
        except KeelgateError as exc:
            raise CommandError(f"{exc.code}: {exc}") from exc
