"""``manage.py paper_ledger [--json] [--mode normal|hang|fail]``: the paper brokerage's ledger."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand

from runs.agents.brokerage import PaperBrokerage


class Command(BaseCommand):
    help = "Show the paper brokerage's ledger: one entry per idempotency key, executions and replays."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="the ledger as JSON")
        parser.add_argument("--mode", choices=["normal", "hang", "fail"], help="make the brokerage misbehave")
        parser.add_argument(
            "--hang-seconds", type=float, default=3600.0, help="how long an order hangs in mode hang"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        brokerage = PaperBrokerage()
        if options["mode"]:
            brokerage.set_mode(options["mode"], hang_seconds=options["hang_seconds"])
            self.stderr.write(f"brokerage mode: {options['mode']}")
        entries = brokerage.ledger()
        if options["json"]:
            self.stdout.write(json.dumps([asdict(e) for e in entries], indent=2, sort_keys=True))
            return
        for e in entries:
            order = f"{e.side:<4} {e.quantity:>6} {e.symbol:<6}"
            self.stdout.write(f"{e.key}  {order} executions={e.executions} replays={e.replays}")
        self.stdout.write(f"{len(entries)} key(s)")
