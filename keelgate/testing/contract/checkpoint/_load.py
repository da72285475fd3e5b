"""Contract of ``CheckpointStore.load``: it returns exactly what was saved."""

from __future__ import annotations

import pytest

from keelgate import errors
from keelgate._state import ActionOutcome, ErrorInfo, PlannedAction
from keelgate._types import ActionStatus, Phase, StopReason
from keelgate.checkpoint._protocol import CheckpointStore
from keelgate.errors import KeelgateError, error_from_code
from keelgate.testing.contract.checkpoint._base import (
    CheckpointStoreFactory,
    StoreContractBase,
    make_state,
    new_run,
    new_tenant,
    rich_state,
)

__all__ = ["LoadContract"]


def _keelgate_errors() -> list[type[KeelgateError]]:
    """Every error class of :mod:`keelgate.errors`, the base included.

    Subclasses defined elsewhere (in tests, say) are left out: they may reuse a code.
    """
    found: list[type[KeelgateError]] = []
    pending: list[type[KeelgateError]] = [KeelgateError]
    while pending:
        cls = pending.pop()
        if cls.__module__ == errors.__name__:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: cls.code)


_ERRORS = _keelgate_errors()


class LoadContract(StoreContractBase):
    """``load`` returns the latest state, equal as JSON to what was saved, or None."""

    def test_round_trip_of_a_rich_state_is_equal_json(self, store: CheckpointStore) -> None:
        """A state using every field (actions, approvals, verdicts, usage, limits, error,
        unicode, aware datetimes in two offsets) loads back as identical JSON."""
        tenant, run = new_tenant(), new_run()
        state = rich_state(tenant, run, 7)
        store.save(state)
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert loaded.to_json() == state.to_json()
        assert loaded == state

    def test_load_of_a_missing_run_is_none(self, store: CheckpointStore) -> None:
        """A run that was never saved loads as None."""
        assert store.load(new_tenant(), new_run()) is None

    def test_load_from_another_tenant_is_none(self, store: CheckpointStore) -> None:
        """A run saved under one tenant is absent (None) when loaded under another."""
        tenant, run = new_tenant(), new_run()
        store.save(make_state(tenant, run, 1))
        assert store.load(new_tenant(), run) is None

    def test_load_returns_the_highest_seq(self, store: CheckpointStore) -> None:
        """After saves of seq 1, 2 and 3, load returns the seq-3 state."""
        tenant, run = new_tenant(), new_run()
        phases = {1: Phase.PLAN, 2: Phase.ACT, 3: Phase.OBSERVE}
        for seq, phase in phases.items():
            store.save(make_state(tenant, run, seq, phase=phase, iteration=seq))
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert (loaded.seq, loaded.phase, loaded.iteration) == (3, Phase.OBSERVE, 3)

    def test_load_returns_a_fresh_copy(self, store: CheckpointStore) -> None:
        """Changing a loaded state does not change what the next load returns."""
        tenant, run = new_tenant(), new_run()
        state = rich_state(tenant, run, 1)
        store.save(state)
        first = store.load(tenant, run)
        assert first is not None
        first.actions.clear()
        first.goal = "changed after load"
        again = store.load(tenant, run)
        assert again is not None
        assert again.to_json() == state.to_json()

    def test_a_new_handle_sees_everything(self, make_store: CheckpointStoreFactory) -> None:
        """A handle opened after the saves loads every run of every tenant at its latest."""
        first, second = new_tenant(), new_tenant()
        writer = make_store()
        expected: dict[tuple[str, str], str] = {}
        for tenant in (first, second):
            for run in (new_run(), new_run()):
                for seq in (1, 2):
                    writer.save(rich_state(tenant, run, seq))
                expected[(tenant, run)] = rich_state(tenant, run, 2).to_json()
        reopened = make_store()
        for (tenant, run), text in expected.items():
            loaded = reopened.load(tenant, run)
            assert loaded is not None
            assert loaded.to_json() == text
        for tenant in (first, second):
            assert reopened.runs(tenant) == [r for (t, r) in expected if t == tenant]

    @pytest.mark.parametrize("error_class", _ERRORS, ids=[cls.code for cls in _ERRORS])
    def test_every_error_code_survives_save_and_load(
        self, store: CheckpointStore, error_class: type[KeelgateError]
    ) -> None:
        """Each keelgate.errors code stored in a state (as its error and as an action's
        outcome) loads back unchanged, and error_from_code rebuilds the same class."""
        tenant, run = new_tenant(), new_run()
        detail = f"act-1 of {run}"
        action = PlannedAction(
            action_id="act-1",
            iteration=1,
            tool="ledger.post",
            arguments={},
            idempotency_key="kg_act-1",
            outcome=ActionOutcome(status=ActionStatus.ERROR, code=error_class.code, detail=detail),
        )
        state = make_state(
            tenant,
            run,
            1,
            phase=Phase.DONE,
            stop_reason=StopReason.ERROR,
            actions=[action],
            error=ErrorInfo(code=error_class.code, detail=detail),
        )
        store.save(state)
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert loaded.to_json() == state.to_json()
        assert loaded.error is not None
        assert loaded.error.message == error_class.message
        for code, stored_detail in (
            (loaded.error.code, loaded.error.detail),
            (loaded.actions[0].outcome.code, loaded.actions[0].outcome.detail),
        ):
            assert code is not None
            rebuilt = error_from_code(code, stored_detail)
            assert type(rebuilt) is error_class
            assert rebuilt.detail == detail
            assert rebuilt.message == error_class.message
