"""Shared fixtures and state builders of the checkpoint store contract."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from keelgate._state import (
    ActionOutcome,
    ApprovalState,
    ApprovalVote,
    ErrorInfo,
    LoopLimits,
    LoopState,
    PlannedAction,
    Usage,
    VerdictRecord,
)
from keelgate._types import ActionStatus, LoopType, Phase, SideEffect, StopReason
from keelgate.checkpoint._protocol import CheckpointStore, HistoryCheckpointStore

__all__ = [
    "AS_OF",
    "CheckpointStoreFactory",
    "HistoryStoreFactory",
    "StoreContractBase",
    "make_state",
    "new_run",
    "new_tenant",
    "rich_state",
]

CheckpointStoreFactory = Callable[[], CheckpointStore]
"""Opens a handle on the store under test; every call opens one over the same storage."""

HistoryStoreFactory = Callable[[], HistoryCheckpointStore]
""":data:`CheckpointStoreFactory` for a store that keeps every checkpoint."""

AS_OF = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
"""Fixed and with microseconds, so a store that truncates time is caught."""

_IST = timezone(timedelta(hours=5, minutes=30))
"""A non-UTC offset, so a store that normalises time zones is caught."""


def new_tenant() -> str:
    """A tenant no other test uses, so stores that share storage across tests still pass."""
    return f"kg-contract-{uuid.uuid4().hex}"


def new_run() -> str:
    """A fresh run id."""
    return f"run-{uuid.uuid4().hex[:12]}"


def make_state(tenant_id: str, run_id: str, seq: int, **changes: Any) -> LoopState:
    """A small valid state; ``changes`` override any field."""
    fields: dict[str, Any] = {
        "tenant_id": tenant_id,
        "run_id": run_id,
        "agent_id": "agent-1",
        "goal": "reconcile the March invoices",
        "as_of": AS_OF,
        "trace_id": f"trace-{run_id}",
        "seq": seq,
    }
    fields.update(changes)
    return LoopState(**fields)


def rich_state(tenant_id: str, run_id: str, seq: int) -> LoopState:
    """A state that uses every part of the model, so a lossy store is caught."""
    at = AS_OF + timedelta(seconds=5)
    done = PlannedAction(
        action_id="act-1",
        iteration=1,
        tool="invoices.list",
        arguments={"month": "2025-03", "limit": 50, "filters": {"paid": False}, "tags": []},
        idempotency_key="kg_run_act-1",
        rationale="find the unpaid ones",
        side_effect=SideEffect.READ,
        outcome=ActionOutcome(
            status=ActionStatus.DONE,
            output='{"invoices": [{"id": "inv-7", "amount": 12.5, "note": "café ☕"}]}',
            replayed=True,
            at=at,
        ),
    )
    waiting = PlannedAction(
        action_id="act-2",
        iteration=2,
        tool="payments.send",
        arguments={"invoice": "inv-7", "amount": 12.5, "currency": "EUR"},
        idempotency_key="kg_run_act-2",
        side_effect=SideEffect.WRITE,
        outcome=ActionOutcome(status=ActionStatus.AWAITING_APPROVAL),
        approval=ApprovalState(
            required=2,
            reason="payments need four eyes",
            requested_at=at,
            expires_at=(at + timedelta(hours=4)).astimezone(_IST),
            approvals=[ApprovalVote(by="alice", at=at + timedelta(minutes=3), note="ok ✓")],
        ),
    )
    unknown = PlannedAction(
        action_id="act-3",
        iteration=2,
        tool="ledger.post",
        arguments={"entry": None, "lines": [1, 2.5, "drei"]},
        idempotency_key="kg_run_act-3",
        side_effect=SideEffect.WRITE,
        outcome=ActionOutcome(
            status=ActionStatus.UNKNOWN,
            code="outcome_unknown",
            detail="act-3",
            settled_by="confirmer",
            at=at.astimezone(_IST),
        ),
    )
    return make_state(
        tenant_id,
        run_id,
        seq,
        goal="Réconcilier les factures de mars — 請求書を照合する 🚢",
        loop_type=LoopType.VERIFICATION,
        allowed_side_effects=[SideEffect.READ, SideEffect.WRITE],
        phase=Phase.OBSERVE,
        iteration=2,
        actions=[done, waiting, unknown],
        final_answer="Two invoices are unpaid.\nSee «inv-7».",
        verdicts=[
            VerdictRecord(
                iteration=1,
                decision="reject",
                reasons=["missing inv-9"],
                flags=["incomplete"],
                answer="one unpaid",
            )
        ],
        verifier_rejections=1,
        usage=Usage(
            input_tokens=1234,
            output_tokens=567,
            dollars=0.012345,
            model_calls=3,
            active_seconds=12.75,
        ),
        limits=LoopLimits(
            max_iterations=10,
            max_tokens=100_000,
            max_dollars=1.5,
            timeout_seconds=600.0,
            max_verifier_rejections=2,
        ),
        stop_reason=StopReason.APPROVAL_PENDING,
        error=ErrorInfo(code="outcome_unknown", detail="act-3"),
        created_at=AS_OF,
        updated_at=at,
    )


class StoreContractBase:
    """Declares the fixtures every part of the contract uses."""

    @pytest.fixture
    def make_store(self) -> CheckpointStoreFactory:
        """Overridden by the subclass: see :class:`CheckpointStoreContract`."""
        raise NotImplementedError("subclasses of CheckpointStoreContract define make_store")

    @pytest.fixture
    def store(self, make_store: CheckpointStoreFactory) -> CheckpointStore:
        """One handle on the store under test."""
        return make_store()
