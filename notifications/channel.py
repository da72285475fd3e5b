"""The seam every notification channel plugs into: what it wants, who gets it, how it is sent.

A channel (email, webhooks, and later chat or a pager) is a class satisfying
:class:`Channel`. The engine does the rest, the same way for every channel:

- :mod:`notifications.cursors` tails each subscriber's audit chain by seq and, in the
  transaction that moves the cursor, records the deliveries the channel routed;
- :mod:`notifications.claims` claims a message's deliveries under a lease, logs each
  attempt, and records the result: delivered, skipped, or a retry after the channel's
  backoff until it gives up;
- :mod:`notifications.passes` runs one pass of a channel (tail, then deliver each
  recipient's due batch), and of every channel in ``KEELGATE_NOTIFICATION_CHANNELS``.

The guarantee is **at least once**: a sender that dies after the far side took a message
and before the result was recorded leaves a claim that lapses, and the message is sent
again. A channel that must not repeat itself gives the far side a stable id (webhooks:
``webhook-id``).

A channel that updates what it sent (a chat message edited when its approval is decided)
sets :attr:`Delivery.item <notifications.models.Delivery.item>` on the deliveries of one
thing, returns the far side's message id as :attr:`Delivered.receipt`, and reads it back
with :func:`notifications.claims.receipt_for` when the update's turn comes. A delivery
about an item waits while an earlier one about the same item to the same recipient is
unfinished, so an update never overtakes its post.

A channel that also hears back (a chat button clicked) does that work in ``receive()``
(:meth:`ChannelDefaults.receive`), which a pass runs before it tails the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, Protocol, TypeVar

from django.db.models import Q

from notifications.models import Delivery

D = TypeVar("D", bound=Delivery)


@dataclass(frozen=True)
class ChainEvent:
    """One audit event as a channel reads it: the body parsed (``{}`` if damaged)."""

    tenant_id: str
    seq: int
    at: str
    actor: str
    kind: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Subscription:
    """One reader of one tenant's chain, with its own cursor.

    ``from_head``: a new cursor starts at the chain's head (a receiver hears what happens
    from now on) rather than at its beginning.
    """

    subscriber: str
    tenant_id: str
    from_head: bool = False


@dataclass(frozen=True)
class Feed:
    """What one cursor read this time: new events, and what the channel held back last time."""

    subscription: Subscription
    events: list[ChainEvent]
    held: list[dict[str, Any]]


@dataclass
class Routed(Generic[D]):
    """What a channel made of some feeds: unsaved deliveries, and what to hold per subscriber."""

    deliveries: list[D] = field(default_factory=list)
    held: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Delivered:
    """The far side took the message; ``receipt`` is how to refer to it later, if it can be."""

    receipt: str = ""
    status_code: int | None = None
    duration_ms: int | None = None
    response: str = ""
    """The start of the far side's answer, kept in the attempt log (where there is one)."""


@dataclass(frozen=True)
class Skipped:
    """Nothing was left to say (every item decided meanwhile): finished, nothing sent."""


@dataclass(frozen=True)
class Failed:
    """The message was not taken. ``stop`` says how far the failure reaches this pass.

    ``message``: this message only, the recipient's next goes on. ``recipient``: the
    recipient is down, its other messages wait for the next pass. ``channel``: the
    channel's own server is down; everyone's remaining messages wait one backoff step,
    without counting it as their attempt.
    """

    error: str
    status_code: int | None = None
    duration_ms: int | None = None
    response: str = ""
    stop: Literal["message", "recipient", "channel"] = "recipient"
    final: bool = False
    """No retry can succeed (the far side revoked our credentials): failed now, not after the backoff."""


Result = Delivered | Skipped | Failed
Send = Callable[[Sequence[Any]], Result]
"""Deliver one message: the claimed deliveries it carries, in order."""


class Channel(Protocol[D]):
    """A way of telling someone that something happened, on the shared delivery engine.

    Three questions make a channel: which events it wants (:attr:`kinds`), who gets
    them (:meth:`subscriptions`, :meth:`route`) and how a batch is delivered
    (:meth:`messages`, :meth:`session`); the rest tunes the engine, and
    :class:`ChannelDefaults` answers it for most channels.

    Contract (the suite in ``tests/site/notifications/contract/`` checks it on every
    channel): :meth:`route` has no side effects (the engine commits its deliveries with
    the cursor's move, or neither); :meth:`session`'s sender never raises for a failure
    of the far side, it returns :class:`Failed`; whatever it sends it may send again
    after a crash (at least once).
    """

    name: str
    """Unique: the cursors' key space, the logs' and the registry's name."""
    model: type[D]
    """The channel's table of :class:`~notifications.models.Delivery` rows."""

    # -- which events it wants -------------------------------------------------------

    kinds: frozenset[str]
    """The audit kinds the engine reads for it; every other event is passed over."""

    # -- who gets them ---------------------------------------------------------------

    def subscriptions(self) -> Iterable[list[Subscription]]:
        """Who reads which chain, in groups: each group's cursors move in one transaction."""
        ...

    def route(self, feeds: list[Feed], now: datetime) -> Routed[D]:
        """The deliveries these events make (unsaved), and what to hold back for the next pass."""
        ...

    # -- delivering a batch ----------------------------------------------------------

    def messages(self, due: list[D]) -> list[list[D]]:
        """How one recipient's due deliveries (its batch, in order) become messages."""
        ...

    def session(self) -> AbstractContextManager[Send]:
        """What one pass (or one worker thread of it) sends with: open, yield the sender, close."""
        ...

    def retry_after(self, attempts: int) -> timedelta | None:
        """The wait after failed attempt number ``attempts``; None: give up (failed)."""
        ...

    # -- tuning (ChannelDefaults has an answer for each) -----------------------------

    @property
    def workers(self) -> int:
        """Recipients served side by side in one pass (threads); 1 for one shared connection."""
        ...

    @property
    def per_pass(self) -> int:
        """Due deliveries looked at per pass."""
        ...

    @property
    def per_recipient(self) -> int:
        """Due deliveries one recipient gets per pass, so one slow recipient starves no other."""
        ...

    def enabled(self) -> bool:
        """Off, a pass does nothing and moves no cursor."""
        ...

    def sendable(self) -> Q:
        """A further condition on due deliveries (their endpoint is enabled), or ``Q()``."""
        ...

    def lease(self) -> timedelta:
        """How long a claim holds: never shorter than a send may take, or a live sender is raced."""
        ...

    def keep_finished(self) -> timedelta | None:
        """How long finished deliveries are kept; None: for good."""
        ...

    def counted(self, outcome: str) -> None:
        """Count one finished attempt (``delivered``, ``skipped``, ``retry``, ``failed``) in metrics."""
        ...


class ChannelDefaults(Generic[D]):
    """The tuning most channels keep: each delivery its own message, sent by :meth:`send`, in order.

    A channel subclasses it and writes what is its own: ``name``, ``model``, ``kinds``,
    ``subscriptions``, ``route``, ``send`` and ``retry_after``.
    """

    per_pass = 200
    per_recipient = 20

    @property
    def workers(self) -> int:
        return 1

    def enabled(self) -> bool:
        return True

    def sendable(self) -> Q:
        return Q()

    def messages(self, due: list[D]) -> list[list[D]]:
        return [[delivery] for delivery in due]

    @contextmanager
    def session(self) -> Iterator[Send]:
        yield self.send

    def send(self, deliveries: Sequence[D]) -> Result:
        """Deliver one message; return what happened (never raise for the far side's failure)."""
        raise NotImplementedError

    def lease(self) -> timedelta:
        return timedelta(seconds=60)

    def keep_finished(self) -> timedelta | None:
        return None

    def counted(self, outcome: str) -> None:
        return None

    def receive(self) -> None:
        """What the far side sent back (clicks recorded by an endpoint), handled at the start of a pass."""
        return None
