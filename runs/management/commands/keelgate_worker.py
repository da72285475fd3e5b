"""``manage.py keelgate_worker [--concurrency N] [--once]``: execute queued and resumable runs."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection

from runs.engine.worker import Worker


class Command(BaseCommand):
    help = "Claim runnable runs under a lease and drive their loops. SIGTERM stops after the current step."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--concurrency", type=int, default=1, help="runs driven at once (threads)")
        parser.add_argument("--once", action="store_true", help="exit when nothing is runnable")
        parser.add_argument(
            "--lease-seconds",
            type=float,
            default=settings.KEELGATE_LEASE_SECONDS,
            help="a run this worker stops renewing is taken over after this (KEELGATE_LEASE_SECONDS)",
        )
        parser.add_argument(
            "--poll-seconds", type=float, default=0.5, help="seconds between looks when nothing is runnable"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("keelgate").setLevel(logging.INFO)
        workers = [
            Worker(lease_seconds=options["lease_seconds"], poll_seconds=options["poll_seconds"])
            for _ in range(max(1, options["concurrency"]))
        ]

        def stop(signum: int, frame: Any) -> None:
            for worker in workers:
                worker.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"keelgate_worker: {len(workers)} thread(s), owner {workers[0].owner}")
        threads = [
            threading.Thread(target=self._serve, args=(w, options["once"]), name=f"worker-{i}")
            for i, w in enumerate(workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.2)
        self.stdout.write("keelgate_worker: stopped")

    def _serve(self, worker: Worker, once: bool) -> None:
        try:
            worker.serve(once=once)
        finally:
            connection.close()
