"""The inbox's subscriptions to what the runs layer announces (connected in ``ApprovalsConfig.ready``)."""

from __future__ import annotations

from typing import Any

from approvals.projection import Send, sync_inbox
from approvals.services import approvals_expire, approvals_warn
from keelgate.loop import LoopState


def on_checkpoint_saved(sender: Any, *, state: LoopState, send: Send, **_: Any) -> None:
    """Project the inbox rows of the state, inside the transaction that saves it."""
    sync_inbox(state, send)


def on_worker_idle(sender: Any, **_: Any) -> None:
    """Apply the deadlines that passed (escalate or deny) and warn of near ones, while idle."""
    approvals_expire()
    approvals_warn()
