"""The inbox's subscriptions to what the runs layer announces (connected in ``ApprovalsConfig.ready``)."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import Model

from approvals.models import Approval
from approvals.projection import sync_inbox
from approvals.services import approvals_expire, approvals_warn
from approvals.standing import standing_apply_run
from keelgate.loop import LoopState
from sitekit.commits import RowWriter

log = logging.getLogger("keelgate.approvals")


def on_checkpoint_saved(
    sender: Any, *, state: LoopState, writer: RowWriter, locked: Model | None = None, **_: Any
) -> None:
    """Project the inbox rows of the state, inside the transaction that saves it (with the
    approval row the deciding service holds locked, if any)."""
    sync_inbox(state, writer, held=locked if isinstance(locked, Approval) else None)


def on_run_waiting(sender: Any, *, tenant_id: str, run_id: str, reason: str = "", **_: Any) -> None:
    """A run stopped for its approvals: the tenant's live standing rules approve those they match.

    Fail closed: if applying them fails (the database went away), the calls wait for people
    and the worker that sent this carries on; the failure is logged."""
    if reason != "approval_pending":
        return
    try:
        standing_apply_run(tenant_id=tenant_id, run_id=run_id)
    except Exception:
        log.exception("standing approval rules not applied to run %s of %s", run_id, tenant_id)


def on_worker_idle(sender: Any, **_: Any) -> None:
    """Apply the deadlines that passed (escalate or deny) and warn of near ones, while idle."""
    approvals_expire()
    approvals_warn()
