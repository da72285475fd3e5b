"""What the runs layer announces, for the layers above it to act on.

A lower layer never calls up: it sends one of these, and an app above subscribes in its
``AppConfig.ready()`` (``approvals`` projects its inbox on ``checkpoint_saved`` and
expires approvals on ``worker_idle``; the engine adapter hands queued runs to Temporal on
``run_queued``). Receivers run in the sender's thread and transaction, and an exception
in one reaches the sender: a projection that fails rolls its checkpoint back with it.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["checkpoint_saved", "run_queued", "run_waiting", "worker_idle"]

checkpoint_saved = Signal()
"""``state``: a checkpoint was saved, inside the transaction that saves it (not yet committed);
``writer`` (a ``sitekit.commits.RowWriter``): the receiver's own row writes join that
transaction, unanswered (on PostgreSQL in the save's next round trip; one that fails aborts
the save); ``locked``: a row the saving service holds locked in it (a decision's approval),
or None, for a receiver to compare with instead of reading it again."""

run_queued = Signal()
"""``tenant_id``, ``run_id``: a run became runnable (start, resume, a decision), after that commit."""

run_waiting = Signal()
"""``tenant_id``, ``run_id``, ``reason``: a worker released a run to wait for a person (its
stop reason: ``approval_pending`` or ``outcome_unknown``), after that commit; the inbox
applies its standing approval rules on it."""

worker_idle = Signal()
"""A worker found nothing to run: time for periodic work (expiring approvals)."""
