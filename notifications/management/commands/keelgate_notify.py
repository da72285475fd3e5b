"""``manage.py keelgate_notify``: run every registered notification channel until stopped.

Each pass runs each channel of ``KEELGATE_NOTIFICATION_CHANNELS`` (webhooks, email and
Slack by default) once: it handles what the far side sent back (Slack's recorded
clicks, decided here), reads the audit chain past each subscriber's cursor and delivers
what is due (retries included). Safe to run several, and safe to SIGKILL: a cursor
only moves with the deliveries for what it passed, and a claim of a sender that died
lapses and is sent again.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand

from notifications.passes import notify_all


class Command(BaseCommand):
    help = (
        "Deliver webhooks, email and Slack messages (every registered channel) about what waits for a"
        " person, and decide the Slack clicks recorded, until Ctrl-C."
    )

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
            sent = notify_all()
            if sent and options["verbosity"] > 0:
                self.stdout.write(f"delivered {sent}")
            if options["once"]:
                return
            time.sleep(options["poll"])
