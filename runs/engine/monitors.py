"""Monitors registered in the site: READ-only loops the worker ticks on a schedule.

``settings.KEELGATE_MONITORS`` maps a monitor id to its tenant, agent, goal and interval.
Each tick is its own run ``<monitor_id>.tick-<n>`` (checkpointed, resumable, listed
with the other runs); the next number comes from what is stored, so a restarted worker
carries on, and a half-done tick is finished before a new one starts.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from keelgate.errors import RunExistsError
from keelgate.loop import Loop, LoopResult, MonitorLoop, Schedule
from runs.engine.loops import build_loop
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Checkpoint
from runs.services import run_record_tick

log = logging.getLogger("keelgate.monitors")


def monitor_for(monitor_id: str, config: dict[str, Any]) -> MonitorLoop:
    """The engine's MonitorLoop for one registered monitor, over the ORM stores."""

    def factory(**kwargs: Any) -> Loop:
        return build_loop(config["agent"], **kwargs)

    return MonitorLoop(
        monitor_id,
        loop_factory=factory,
        tenant_id=config["tenant"],
        agent_id=config["agent"],
        goal=config["goal"],
        store=DjangoCheckpointStore(),
        schedule=Schedule(float(config.get("interval_seconds", 60))),
    )


def _last_tick_at(monitor: MonitorLoop, tenant_id: str) -> Any:
    ticks = monitor.stored_ticks()
    if not ticks:
        return None
    return (
        Checkpoint.objects.filter(tenant_id=tenant_id, run_id=monitor.tick_run_id(max(ticks)), seq=1)
        .values_list("saved_at", flat=True)
        .first()
    )


def monitors_tick_due() -> list[LoopResult]:
    """Run one tick of every registered monitor whose interval has passed."""
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as in runs/engine/worker.py
    results = []
    for monitor_id, config in getattr(settings, "KEELGATE_MONITORS", {}).items():
        monitor = monitor_for(monitor_id, config)
        last = _last_tick_at(monitor, config["tenant"])
        interval = timedelta(seconds=float(config.get("interval_seconds", 60)))
        if last is not None and timezone.now() - last < interval:
            continue
        try:
            result = asyncio.run(monitor.tick())
        except RunExistsError:  # another worker started this tick a moment ago
            continue
        run_record_tick(state=result.state, agent=config["agent"], stop_reason=result.stop_reason)
        log.info("monitor tick run=%s reason=%s", result.run_id, result.stop_reason.value)
        results.append(result)
    return results
