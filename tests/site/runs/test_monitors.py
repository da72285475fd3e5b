"""Monitors registered in settings are ticked by the worker, READ-only, one run per tick."""

from __future__ import annotations

from runs.agents.brokerage import PaperBrokerage
from runs.engine.monitors import monitors_tick_due
from runs.models import Run, RunStatus


def watch(settings, interval: float) -> None:
    settings.KEELGATE_MONITORS = {
        "acme-watch": {
            "tenant": "t1",
            "agent": "paper-trader",
            "goal": "buy 1 ACME",
            "interval_seconds": interval,
        }
    }


def test_a_due_monitor_ticks_as_its_own_read_only_run(operator, brokerage_path, settings):
    """The tick is run acme-watch.tick-1, listed with the runs; its WRITE is refused, nothing is bought."""
    watch(settings, 3600)
    [result] = monitors_tick_due()
    assert result.run_id == "acme-watch.tick-1" and result.goal_reached
    order = result.state.action("1-2")
    assert order.outcome.code == "side_effect_not_permitted"
    assert PaperBrokerage().ledger() == []
    run = Run.objects.get(tenant_id="t1", run_id="acme-watch.tick-1")
    assert run.status == RunStatus.DONE and run.created_by == "monitor"


def test_the_next_tick_waits_for_the_interval_and_numbers_on_from_the_store(
    operator, brokerage_path, settings
):
    """Within the interval nothing ticks; with it elapsed, tick-2 follows tick-1."""
    watch(settings, 3600)
    monitors_tick_due()
    assert monitors_tick_due() == []
    watch(settings, 0)
    [second] = monitors_tick_due()
    assert second.run_id == "acme-watch.tick-2"
