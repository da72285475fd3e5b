"""Contract of ``CheckpointStore.runs``."""

from __future__ import annotations

import pytest

from keelgate.checkpoint._protocol import CheckpointStore
from keelgate.errors import StaleCheckpointError
from keelgate.testing.contract.checkpoint._base import (
    StoreContractBase,
    make_state,
    new_run,
    new_tenant,
)

__all__ = ["RunsContract"]


class RunsContract(StoreContractBase):
    """``runs`` lists a tenant's own run ids, once each, oldest first."""

    def test_runs_of_an_unknown_tenant_is_empty(self, store: CheckpointStore) -> None:
        """A tenant with no checkpoints has no runs."""
        assert store.runs(new_tenant()) == []

    def test_runs_are_listed_once_in_order_of_first_save(self, store: CheckpointStore) -> None:
        """Runs first saved as b, a, c are listed b, a, c, however often each is saved later."""
        tenant = new_tenant()
        b, a, c = new_run(), new_run(), new_run()
        store.save(make_state(tenant, b, 1))
        store.save(make_state(tenant, a, 1))
        store.save(make_state(tenant, b, 2))
        store.save(make_state(tenant, c, 1))
        store.save(make_state(tenant, a, 2))
        store.save(make_state(tenant, b, 3))
        assert store.runs(tenant) == [b, a, c]

    def test_runs_lists_only_the_tenants_own_runs(self, store: CheckpointStore) -> None:
        """Each tenant sees its own runs only, even when run ids coincide."""
        first, second = new_tenant(), new_tenant()
        shared, only_first, only_second = new_run(), new_run(), new_run()
        store.save(make_state(first, shared, 1))
        store.save(make_state(first, only_first, 1))
        store.save(make_state(second, only_second, 1))
        store.save(make_state(second, shared, 1))
        assert store.runs(first) == [shared, only_first]
        assert store.runs(second) == [only_second, shared]

    def test_a_refused_save_adds_no_run(self, store: CheckpointStore) -> None:
        """A stale save of an existing run leaves the run list as it was."""
        tenant, run = new_tenant(), new_run()
        store.save(make_state(tenant, run, 2))
        with pytest.raises(StaleCheckpointError):
            store.save(make_state(tenant, run, 1))
        assert store.runs(tenant) == [run]
