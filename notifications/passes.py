"""One pass of a channel: tail the chain into deliveries, then deliver each recipient's due batch.

:func:`notify_all` runs one pass of every channel in ``KEELGATE_NOTIFICATION_CHANNELS``
(dotted paths of classes: the registry). A channel is named there, never imported
here: the engine knows no channel, and each channel knows only the engine.

:func:`deliver` finds the channel's due deliveries (oldest first), batches them by
recipient (at most ``per_recipient`` each), and has the channel cut each batch into
messages. Each message is claimed, sent through the channel's session and recorded
(:mod:`notifications.claims`), a recipient's in the order they were made; a
delivery about an item (``Delivery.item``) waits while an earlier one about the same
item to the same recipient is unfinished, so an update never overtakes its post. A
failure stops what the channel says it reaches: the
message, the recipient (down: its other messages wait for the next pass), or the whole
channel (its server is down: everyone's remaining messages are put off one backoff
step). Recipients are served side by side on ``workers`` threads, each with a session
of its own.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from django.utils import timezone
from django.utils.module_loading import import_string

from notifications.channel import Channel, D, Delivered, Failed, Send
from notifications.claims import claim, defer, due, record
from notifications.cursors import tail
from notifications.models import DeliveryStatus

log = logging.getLogger("keelgate.notifications")


def channels() -> list[Channel[Any]]:
    """One instance of each registered channel, in the setting's order; names must be unique."""
    found: list[Channel[Any]] = [import_string(path)() for path in settings.KEELGATE_NOTIFICATION_CHANNELS]
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


def run_pass(channel: Channel[Any]) -> int:
    """One pass: what the far side sent back, then record what the chain announced and send what is due."""
    if not channel.enabled():
        return 0
    receive = getattr(channel, "receive", None)  # a channel that hears back (ChannelDefaults.receive)
    if receive is not None:
        receive()
    tail(channel)
    return deliver(channel)


def deliver(channel: Channel[D]) -> int:
    """Send every due message of the channel once; the number delivered."""
    now = timezone.now()
    rows = list(
        channel.model._default_manager.filter(due(now))
        .filter(channel.sendable())
        .order_by("next_attempt_at", "pk")
        .values_list("pk", channel.model.RECIPIENT, "item")[: channel.per_pass]
    )
    batches: dict[Any, list[int]] = defaultdict(list)
    # Each recipient's share in the order the deliveries were made, not by when each is
    # due: a post waiting out a retry is due after the update made meanwhile, and a cut
    # by due time could keep the update and drop its post.
    for pk, recipient, _ in sorted(_after_their_items(channel, rows)):
        if len(batches[recipient]) < channel.per_recipient:
            batches[recipient].append(pk)
    groups = list(batches.values())
    if not groups:
        return 0  # and takes no write lock
    down = threading.Event()
    if len(groups) <= 1 or channel.workers <= 1:
        with channel.session() as send:
            delivered = sum(_deliver_batch(channel, send, group, down) for group in groups)
    else:
        with ThreadPoolExecutor(max_workers=min(channel.workers, len(groups))) as pool:
            delivered = sum(pool.map(lambda group: _threaded(channel, group, down), groups))
    if down.is_set():
        defer(channel, [pk for group in groups for pk in group], now)
    _prune(channel)
    return delivered


def _after_their_items(channel: Channel[Any], rows: list[tuple[int, Any, str]]) -> list[tuple[int, Any, str]]:
    """The due rows less those waiting for an earlier delivery of the same item to the same recipient.

    An update must not overtake its post: while the post waits for its retry (not due
    yet), the update of the same item waits too.
    """
    items = {item for _, _, item in rows if item}
    if not items:
        return rows
    unfinished = (
        channel.model._default_manager.filter(
            item__in=items, status__in=[DeliveryStatus.PENDING, DeliveryStatus.DELIVERING]
        )
        .exclude(pk__in=[pk for pk, _, _ in rows])
        .values_list("pk", channel.model.RECIPIENT, "item")
    )
    first: dict[tuple[Any, str], int] = {}
    for pk, recipient, item in unfinished:
        first[(recipient, item)] = min(pk, first.get((recipient, item), pk))
    return [row for row in rows if not row[2] or first.get((row[1], row[2]), row[0]) >= row[0]]


def _threaded(channel: Channel[D], pks: list[int], down: threading.Event) -> int:
    try:
        with channel.session() as send:
            return _deliver_batch(channel, send, pks, down)
    finally:
        connections.close_all()  # this thread's own connections


def _deliver_batch(channel: Channel[D], send: Send, pks: list[int], down: threading.Event) -> int:
    """One recipient's due deliveries, message by message in order, until a failure stops them."""
    if down.is_set():
        return 0
    delivered = 0
    failed_items: set[str] = set()
    try:
        # In the order they were made: the chain's order, and a post before its update.
        due_now = list(channel.model._default_manager.filter(pk__in=pks).order_by("pk"))
        for message in channel.messages(due_now):
            if any(d.item in failed_items for d in message):
                continue  # its item's earlier message failed this pass: it waits its turn
            held = claim(channel, [d.pk for d in message])
            if held is None:
                continue
            result = send(held.deliveries)
            record(channel, held, result)
            if isinstance(result, Delivered):
                delivered += 1
                continue
            failed_items.update(d.item for d in message if d.item)
            if isinstance(result, Failed) and result.stop != "message":
                if result.stop == "channel":
                    down.set()
                    log.warning("notifications: %s is down (%s); retrying later", channel.name, result.error)
                break
    except DatabaseError:
        # A claim that was taken stays claimed; its lease runs out and it is sent again.
        log.exception(
            "notifications: %s delivery failed on the database; the next pass retries", channel.name
        )
    return delivered


def _prune(channel: Channel[Any]) -> None:
    keep = channel.keep_finished()
    if keep is not None:
        finished = [DeliveryStatus.DELIVERED, DeliveryStatus.SKIPPED, DeliveryStatus.FAILED]
        channel.model._default_manager.filter(
            status__in=finished, finished_at__lt=timezone.now() - keep
        ).delete()
