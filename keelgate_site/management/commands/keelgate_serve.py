"""``manage.py keelgate_serve``: the whole product in one command (what ``make run`` calls).

Migrates, creates the demo (``keelgate_demo``), then serves the console with Daphne on
127.0.0.1:8000 (``--bind``; with DEBUG on, loopback only) and runs a ``keelgate_worker``
a ``keelgate_notify`` (webhooks, email) and a ``keelgate_sequencer`` (the audit log's
numbers and signed checkpoints) beside it, stopping all of them on Ctrl-C.

``--web-processes N`` starts N Daphne processes on one listening socket that this
command binds and hands to each (Daphne's ``--fd``), each taking one new connection per
turn of its event loop (``keelgate_site.web_process``), so a burst is shared between them.
One Daphne runs Django's sync views on one thread under one GIL, so a process uses
about one core: N processes use N (docs/performance.md#api).
Several processes need ``REDIS_URL`` (one channel layer and one rate-limit count).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

DAPHNE_APP = "keelgate_site.asgi:application"
WEB_PROCESS = "keelgate_site.web_process"
"""Daphne's command line, accepting one connection per turn: several share a socket's connections."""
WEB_POOL_SIZE = "8"
"""``KEELGATE_DB_POOL`` of each web process on PostgreSQL unless the environment sets it."""


def listening_socket(bind: str, port: int, backlog: int = 1024) -> socket.socket:
    """A bound, listening TCP socket that child processes inherit (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind.strip("[]"), port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def daphne_on_socket(
    sock: socket.socket,
    processes: int,
    *,
    env: dict[str, str] | None = None,
    extra: list[str] | None = None,
    **popen: Any,
) -> list[subprocess.Popen[bytes]]:
    """Start ``processes`` Daphne serving the site on ``sock``, which each inherits."""
    command = [sys.executable, "-m", WEB_PROCESS, "--fd", str(sock.fileno()), *(extra or []), DAPHNE_APP]
    return [subprocess.Popen(command, env=env, pass_fds=(sock.fileno(),), **popen) for _ in range(processes)]


class Command(BaseCommand):
    help = "Migrate, create the demo, and run Daphne plus a worker until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=8000, help="the port Daphne listens on")
        parser.add_argument("--bind", default="127.0.0.1", help="the address Daphne listens on")
        parser.add_argument("--password", help="the demo operator's password")
        parser.add_argument(
            "--web-processes",
            type=int,
            default=1,
            help="Daphne processes sharing the listening socket (more than 1 needs REDIS_URL)",
        )

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
        if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
            # Daphne opens a connection per request otherwise (docs/performance.md#pool-check).
            web_env.setdefault("KEELGATE_DB_POOL", WEB_POOL_SIZE)
        processes = options["web_processes"]
        if processes < 1:
            raise CommandError("--web-processes must be at least 1")
        if processes > 1 and not settings.REDIS_URL:
            self.stderr.write(
                "warning: several web processes without REDIS_URL each keep their own channel layer"
                " and rate-limit counts"
            )
        sock = listening_socket(options["bind"], options["port"])
        children = [
            *daphne_on_socket(sock, processes, env=web_env),
            subprocess.Popen([python, "manage.py", "keelgate_worker"]),
            # Webhooks and email about what waits, delivered from the audit chain.
            subprocess.Popen([python, "manage.py", "keelgate_notify"]),
            # Numbers audit events into each tenant's tree and signs its checkpoints.
            subprocess.Popen([python, "manage.py", "keelgate_sequencer"]),
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
            sock.close()
        self.stdout.write("stopped")
