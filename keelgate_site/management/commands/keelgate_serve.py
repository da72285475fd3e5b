"""``manage.py keelgate_serve``: the whole product in one command (what ``make run`` calls).

Migrates, creates the demo (``keelgate_demo``), then serves the console with Daphne on
127.0.0.1:8000 (``--bind``; with DEBUG on, loopback only) and runs a ``keelgate_worker``
and a ``keelgate_notify`` (webhooks, email) beside it, stopping all of them on Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Migrate, create the demo, and run Daphne plus a worker until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--bind", default="127.0.0.1", help="the address Daphne listens on")
        parser.add_argument("--password", help="the demo operator's password")

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.DEBUG and options["bind"] not in settings.LOOPBACK_HOSTS:
            # DEBUG pages show settings and URL patterns: never to another machine.
            raise CommandError(f"KEELGATE_DEBUG=1 serves loopback only; refusing to bind {options['bind']}")
        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("keelgate_demo", password=options["password"])
        python = sys.executable
        # The demo above drove a worker in this process, which lifts Django's async-safety
        # guard (see runs/engine/worker.py); the web server must keep it.
        web_env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
        children = [
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "daphne",
                    "-b",
                    options["bind"],
                    "-p",
                    str(options["port"]),
                    "keelgate_site.asgi:application",
                ],
                env=web_env,
            ),
            subprocess.Popen([python, "manage.py", "keelgate_worker"]),
            # Webhooks and email about what waits, delivered from the audit chain.
            subprocess.Popen([python, "manage.py", "keelgate_notify"]),
        ]
        self.stdout.write(f"console: http://{options['bind']}:{options['port']}/  (Ctrl-C stops everything)")
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping and all(child.poll() is None for child in children):
                time.sleep(0.2)
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
        self.stdout.write("stopped")
