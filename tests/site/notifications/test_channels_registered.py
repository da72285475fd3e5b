"""``keelgate_notify`` runs the channels of ``KEELGATE_NOTIFICATION_CHANNELS``: each once a pass, in order."""

from __future__ import annotations

import signal

import pytest
from django.core.management import call_command

from notifications.passes import channels, notify_all

RAN: list[str] = []


class Probe:
    """The least a channel needs to be run: a name, and ``enabled`` (off: the pass ends there)."""

    name = "probe"

    def enabled(self) -> bool:
        RAN.append(self.name)
        return False


class Second(Probe):
    name = "second"


class Broken(Probe):
    name = "broken"

    def enabled(self) -> bool:
        raise RuntimeError("a bug in one channel")


HERE = "tests.site.notifications.test_channels_registered"


@pytest.fixture(autouse=True)
def _fresh():
    RAN.clear()


def test_each_registered_channel_runs_once_a_pass_in_order(settings, monkeypatch):
    """Two channels registered: one ``--once`` pass runs both, in the setting's order, and nothing else."""
    settings.KEELGATE_NOTIFICATION_CHANNELS = [f"{HERE}.Second", f"{HERE}.Probe"]
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the test process keeps its own handlers
    call_command("keelgate_notify", "--once")
    assert RAN == ["second", "probe"]


def test_a_failing_channel_stops_no_other(settings, caplog):
    """A channel that raises is logged, and the channels after it still run."""
    settings.KEELGATE_NOTIFICATION_CHANNELS = [f"{HERE}.Broken", f"{HERE}.Probe"]
    assert notify_all() == 0
    assert RAN == ["probe"]
    assert "the broken pass failed" in caplog.text


def test_two_channels_may_not_share_a_name(settings):
    """A name keys a channel's cursors: a second channel of the same name is refused."""
    settings.KEELGATE_NOTIFICATION_CHANNELS = [f"{HERE}.Probe", f"{HERE}.Probe"]
    with pytest.raises(ValueError, match="share a name"):
        channels()


def test_the_default_channels_are_webhooks_then_email_then_slack():
    """Out of the box: webhooks, email and Slack, the channels of the product."""
    assert [c.name for c in channels()] == ["webhooks", "email", "slack"]
