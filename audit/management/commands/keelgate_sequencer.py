"""``manage.py keelgate_sequencer``: number pending audit events and sign checkpoints.

On PostgreSQL, appends only insert their events; this process gives them their numbers
in each tenant's tree and signs the checkpoints (``audit.sequencer``). On SQLite appends
number their own events, and this process signs the checkpoints. Safe to run several.
With witnesses named (``KEELGATE_AUDIT_WITNESSES``), a thread of it sends each tenant's
newest checkpoint to each and keeps their cosignatures (``audit.witnesses``).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from audit import witnesses
from audit.sequencer import POLL_SECONDS, serve, tick


class Command(BaseCommand):
    help = (
        "Sequence pending audit events into each tenant's tree and sign checkpoints, until stopped; "
        "send each new checkpoint to the witnesses of KEELGATE_AUDIT_WITNESSES and keep their cosignatures."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument(
            "--poll",
            type=float,
            default=POLL_SECONDS,
            help=f"Seconds to rest between two passes (default {POLL_SECONDS}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        named = witnesses.configured_witnesses()  # a bad entry stops the command here, not in a thread
        if options["once"]:
            sequenced, signed = tick()
            self.stdout.write(f"sequenced {sequenced} events, signed {signed} checkpoints")
            if named:
                done = witnesses.witness_pass(witnesses=named)
                self.stdout.write(f"witnesses: {done.cosigned} cosigned, {done.failed} failed")
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write("keelgate_sequencer: running (Ctrl-C to stop)")
        sender = None
        if named:
            sender = threading.Thread(target=witnesses.serve, args=(stop,), name="witnesses", daemon=True)
            sender.start()
            self.stdout.write(f"keelgate_sequencer: sending checkpoints to {len(named)} witnesses")
        serve(stop, poll=options["poll"])
        if sender is not None:
            sender.join(timeout=float(settings.KEELGATE_AUDIT_WITNESS_TIMEOUT_SECONDS) * 3 + 5)
