"""``manage.py keelgate_sequencer``: number pending audit events and sign checkpoints.

On PostgreSQL, appends only insert their events; this process gives them their numbers
in each tenant's tree and signs the checkpoints (``audit.sequencer``). On SQLite appends
number their own events, and this process signs the checkpoints. Safe to run several.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit.sequencer import POLL_SECONDS, serve, tick


class Command(BaseCommand):
    help = "Sequence pending audit events into each tenant's tree and sign checkpoints, until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument(
            "--poll",
            type=float,
            default=POLL_SECONDS,
            help=f"Seconds to rest between two passes (default {POLL_SECONDS}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"]:
            sequenced, signed = tick()
            self.stdout.write(f"sequenced {sequenced} events, signed {signed} checkpoints")
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write("keelgate_sequencer: running (Ctrl-C to stop)")
        serve(stop, poll=options["poll"])
