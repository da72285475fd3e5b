"""Contract of ``CheckpointStore.save``."""

from __future__ import annotations

import threading

import pytest

from keelgate._types import Phase
from keelgate.checkpoint._protocol import CheckpointStore
from keelgate.errors import StaleCheckpointError
from keelgate.testing.contract.checkpoint._base import (
    CheckpointStoreFactory,
    StoreContractBase,
    make_state,
    new_run,
    new_tenant,
)

__all__ = ["SaveContract"]

_RACERS = 8


class SaveContract(StoreContractBase):
    """``save`` is atomic, copies the state, and refuses a seq that is not newer."""

    def test_save_satisfies_the_protocol(self, store: CheckpointStore) -> None:
        """The store is a ``CheckpointStore`` at runtime (it has save, load and runs)."""
        assert isinstance(store, CheckpointStore)

    def test_first_save_accepts_seq_zero(self, store: CheckpointStore) -> None:
        """A run with no checkpoint accepts any seq, including the default 0."""
        tenant, run = new_tenant(), new_run()
        store.save(make_state(tenant, run, 0))
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert loaded.seq == 0

    def test_newer_seqs_need_not_be_contiguous(self, store: CheckpointStore) -> None:
        """Any seq above the latest is accepted, gaps included."""
        tenant, run = new_tenant(), new_run()
        for seq in (1, 5, 6, 100):
            store.save(make_state(tenant, run, seq))
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert loaded.seq == 100

    def test_same_seq_is_stale_and_leaves_the_stored_state(self, store: CheckpointStore) -> None:
        """A second save of the latest seq raises StaleCheckpointError; the first stays."""
        tenant, run = new_tenant(), new_run()
        first = make_state(tenant, run, 1, goal="first writer")
        store.save(first)
        with pytest.raises(StaleCheckpointError) as caught:
            store.save(make_state(tenant, run, 1, goal="second writer", phase=Phase.DONE))
        assert caught.value.code == "stale_checkpoint"
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert loaded.to_json() == first.to_json()

    def test_lower_seq_is_stale(self, store: CheckpointStore) -> None:
        """A save below the latest seq raises StaleCheckpointError and stores nothing."""
        tenant, run = new_tenant(), new_run()
        latest = make_state(tenant, run, 3, phase=Phase.VERIFY)
        store.save(latest)
        with pytest.raises(StaleCheckpointError):
            store.save(make_state(tenant, run, 2))
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert loaded.to_json() == latest.to_json()

    def test_stale_writer_on_a_second_handle_is_refused(self, make_store: CheckpointStoreFactory) -> None:
        """Handle B, which last saw seq 1, cannot save seq 2 after handle A saved seq 2."""
        tenant, run = new_tenant(), new_run()
        a, b = make_store(), make_store()
        a.save(make_state(tenant, run, 1))
        seen = b.load(tenant, run)
        assert seen is not None
        assert seen.seq == 1
        winner = make_state(tenant, run, 2, goal="handle A")
        a.save(winner)
        with pytest.raises(StaleCheckpointError):
            b.save(seen.model_copy(update={"seq": 2, "goal": "handle B"}))
        for handle in (a, b):
            loaded = handle.load(tenant, run)
            assert loaded is not None
            assert loaded.to_json() == winner.to_json()

    def test_concurrent_saves_of_one_seq_have_one_winner(self, make_store: CheckpointStoreFactory) -> None:
        """8 threads, each on its own handle, save seq 1 at once: exactly one succeeds."""
        tenant, run = new_tenant(), new_run()
        handles = [make_store() for _ in range(_RACERS)]
        barrier = threading.Barrier(_RACERS)
        winners: list[int] = []
        stale: list[int] = []
        errors: list[BaseException] = []
        guard = threading.Lock()

        def racer(i: int) -> None:
            state = make_state(tenant, run, 1, goal=f"writer {i}")
            try:
                barrier.wait(timeout=30)
                handles[i].save(state)
            except StaleCheckpointError:
                with guard:
                    stale.append(i)
            except BaseException as exc:  # reported below, not lost in the thread
                with guard:
                    errors.append(exc)
            else:
                with guard:
                    winners.append(i)

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(_RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert len(winners) == 1
        assert len(stale) == _RACERS - 1
        loaded = handles[0].load(tenant, run)
        assert loaded is not None
        assert loaded.goal == f"writer {winners[0]}"

    def test_save_stores_a_copy(self, store: CheckpointStore) -> None:
        """Changing a state object after saving it does not change what is stored."""
        tenant, run = new_tenant(), new_run()
        state = make_state(tenant, run, 1)
        expected = state.to_json()
        store.save(state)
        state.goal = "changed after save"
        state.verdicts.clear()
        state.usage.input_tokens = 999
        loaded = store.load(tenant, run)
        assert loaded is not None
        assert loaded.to_json() == expected

    def test_same_run_id_in_two_tenants_is_independent(self, store: CheckpointStore) -> None:
        """Seqs are per tenant: a run id saved at seq 5 in one tenant may start at 1 in another."""
        run = new_run()
        first, second = new_tenant(), new_tenant()
        store.save(make_state(first, run, 5, goal="first tenant"))
        store.save(make_state(second, run, 1, goal="second tenant"))
        store.save(make_state(second, run, 2, goal="second tenant, later"))
        a, b = store.load(first, run), store.load(second, run)
        assert a is not None
        assert b is not None
        assert (a.seq, a.goal) == (5, "first tenant")
        assert (b.seq, b.goal) == (2, "second tenant, later")
