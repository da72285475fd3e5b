"""Contract of ``HistoryCheckpointStore.history``: every checkpoint, in order."""

from __future__ import annotations

import pytest

from keelgate.checkpoint._protocol import HistoryCheckpointStore
from keelgate.errors import StaleCheckpointError
from keelgate.testing.contract.checkpoint._base import (
    HistoryStoreFactory,
    StoreContractBase,
    make_state,
    new_run,
    new_tenant,
    rich_state,
)

__all__ = ["HistoryContract"]


class HistoryContract(StoreContractBase):
    """``history`` returns every accepted checkpoint of a run, lowest seq first."""

    @pytest.fixture
    def history_store(self, make_store: HistoryStoreFactory) -> HistoryCheckpointStore:
        """One handle on the store under test, checked to keep history."""
        store = make_store()
        assert isinstance(store, HistoryCheckpointStore)
        return store

    def test_history_of_a_missing_run_is_empty(self, history_store: HistoryCheckpointStore) -> None:
        """A run that was never saved has an empty history."""
        assert history_store.history(new_tenant(), new_run()) == []

    def test_history_is_every_checkpoint_in_seq_order(self, history_store: HistoryCheckpointStore) -> None:
        """Saves of seq 1, 2, 5 and 9 come back as those four states, in that order."""
        tenant, run = new_tenant(), new_run()
        saved = [rich_state(tenant, run, seq) for seq in (1, 2, 5, 9)]
        for state in saved:
            history_store.save(state)
        history = history_store.history(tenant, run)
        assert [s.seq for s in history] == [1, 2, 5, 9]
        assert [s.to_json() for s in history] == [s.to_json() for s in saved]

    def test_history_ends_with_what_load_returns(self, history_store: HistoryCheckpointStore) -> None:
        """The last checkpoint in the history is the state ``load`` returns."""
        tenant, run = new_tenant(), new_run()
        for seq in (1, 2, 3):
            history_store.save(make_state(tenant, run, seq, iteration=seq))
        loaded = history_store.load(tenant, run)
        assert loaded is not None
        assert history_store.history(tenant, run)[-1].to_json() == loaded.to_json()

    def test_history_leaves_out_refused_saves(self, history_store: HistoryCheckpointStore) -> None:
        """Stale saves (same or lower seq) do not appear in the history."""
        tenant, run = new_tenant(), new_run()
        history_store.save(make_state(tenant, run, 1))
        history_store.save(make_state(tenant, run, 3))
        for seq in (3, 2):
            with pytest.raises(StaleCheckpointError):
                history_store.save(make_state(tenant, run, seq, goal="stale"))
        history = history_store.history(tenant, run)
        assert [s.seq for s in history] == [1, 3]
        assert all(s.goal != "stale" for s in history)

    def test_history_is_per_tenant(self, history_store: HistoryCheckpointStore) -> None:
        """The same run id in two tenants has two separate histories; a third has none."""
        run = new_run()
        first, second = new_tenant(), new_tenant()
        for seq in (1, 2, 3):
            history_store.save(make_state(first, run, seq))
        history_store.save(make_state(second, run, 10))
        assert [s.seq for s in history_store.history(first, run)] == [1, 2, 3]
        assert [s.seq for s in history_store.history(second, run)] == [10]
        assert history_store.history(new_tenant(), run) == []

    def test_a_new_handle_sees_the_whole_history(self, make_store: HistoryStoreFactory) -> None:
        """A handle opened after the saves returns the same history, in the same order."""
        tenant, run = new_tenant(), new_run()
        writer = make_store()
        saved = [rich_state(tenant, run, seq) for seq in range(1, 6)]
        for state in saved:
            writer.save(state)
        reopened = make_store()
        assert [s.to_json() for s in reopened.history(tenant, run)] == [s.to_json() for s in saved]
