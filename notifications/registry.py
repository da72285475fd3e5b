"""The channels ``keelgate_notify`` runs: ``KEELGATE_NOTIFICATION_CHANNELS``, dotted paths of classes.

A new channel is added here by name (or in the setting), never by an import: the engine
below knows no channel, and each channel knows only the engine.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from notifications.channel import Channel
from notifications.passes import run_pass

log = logging.getLogger("keelgate.notifications")

DEFAULT_CHANNELS = (
    "notifications.webhooks.WebhookChannel",
    "notifications.emails.EmailChannel",
)


def channels() -> list[Channel[Any]]:
    """One instance of each registered channel, in the setting's order; names must be unique."""
    paths = getattr(settings, "KEELGATE_NOTIFICATION_CHANNELS", DEFAULT_CHANNELS)
    found: list[Channel[Any]] = [import_string(path)() for path in paths]
    names = [channel.name for channel in found]
    if len(set(names)) != len(names):
        raise ValueError(f"two notification channels share a name: {names}")
    return found


def notify_all() -> int:
    """One pass of every registered channel; messages delivered. One failing channel stops no other."""
    delivered = 0
    for channel in channels():
        try:
            delivered += run_pass(channel)
        except Exception:
            log.exception("notifications: the %s pass failed; the next pass tries again", channel.name)
    return delivered
