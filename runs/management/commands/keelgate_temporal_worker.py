"""``manage.py keelgate_temporal_worker``: execute runs handed to Temporal (KEELGATE_RUNNER=temporal)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from runs.engine.temporal import loop_for, record_outcome


class Command(BaseCommand):
    help = "Run a Temporal worker that executes Keelgate loops with the site's agents and stores."

    def handle(self, *args: Any, **options: Any) -> None:
        # The activity drives the async engine, whose stores call the ORM; each call is
        # sequential within the activity (see runs/engine/worker.py for the same reasoning).
        os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        # The Temporal extra is optional: only this command needs it.
        from temporalio.client import Client

        from keelgate.contrib.temporal import temporal_worker

        client = await Client.connect(settings.KEELGATE_TEMPORAL_ADDRESS)
        worker = temporal_worker(
            client,
            task_queue=settings.KEELGATE_TEMPORAL_TASK_QUEUE,
            loop_factory=loop_for,
            on_outcome=record_outcome,
        )
        self.stdout.write(f"keelgate_temporal_worker on {settings.KEELGATE_TEMPORAL_ADDRESS}")
        await worker.run()
