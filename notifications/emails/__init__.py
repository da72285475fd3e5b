"""Email to people about what waits for them, one channel on the shared engine.

- ``channel``: :class:`EmailChannel`, what it reads, who gets what, one message per person.
- ``items``: the approvals and unknown outcomes the chain names, and who may decide each.
- ``message``: what one message says, and never says.
"""

from notifications.cursors import tail
from notifications.emails.channel import EmailChannel
from notifications.emails.message import WaitingItem
from notifications.passes import deliver, run_pass

__all__ = ["EmailChannel", "WaitingItem", "queue_due", "send_due", "send_queued"]


def send_due() -> int:
    """One pass of the email channel: queue what the chains announced, send what is due. Messages sent."""
    return run_pass(EmailChannel())


def queue_due() -> int:
    """Read every tenant's chain past its cursor and queue one batch per person. Batches queued."""
    return tail(EmailChannel())


def send_queued() -> int:
    """Send every due batch, one message per person. Messages sent."""
    return deliver(EmailChannel())
