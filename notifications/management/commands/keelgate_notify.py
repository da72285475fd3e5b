"""``manage.py keelgate_notify``: deliver webhooks and email until stopped.

Each pass reads the audit chain past each receiver's cursor and delivers what is due
(retries included). Safe to run several, and safe to SIGKILL: a cursor only moves
after what it passed was recorded as delivered or scheduled for retry.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand

from notifications import emails, webhooks


class Command(BaseCommand):
    help = "Deliver webhooks and email about what waits for a person, until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument("--poll", type=float, default=1.0, help="seconds between passes")

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while not stopping:
            sent = webhooks.deliver_due() + emails.send_due()
            if sent and options["verbosity"] > 0:
                self.stdout.write(f"delivered {sent}")
            if options["once"]:
                return
            time.sleep(options["poll"])
