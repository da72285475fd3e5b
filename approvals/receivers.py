"""The inbox's subscriptions to what the runs layer announces (connected in ``ApprovalsConfig.ready``)."""

from __future__ import annotations

from typing import Any

from approvals.projection import sync_inbox
from approvals.services import approvals_expire
from keelgate.loop import LoopState


def on_checkpoint_saved(sender: Any, *, state: LoopState, **_: Any) -> None:
    """Project the inbox rows of the state, inside the transaction that saves it."""
    sync_inbox(state)


def on_worker_idle(sender: Any, **_: Any) -> None:
    """Deny what expired (fail closed) while a worker has nothing else to do."""
    approvals_expire()
