"""Where loop state is saved after every step."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from keelgate._state import LoopState

__all__ = ["CheckpointStore", "HistoryCheckpointStore"]


@runtime_checkable
class CheckpointStore(Protocol):
    """Where loop state is saved after every step.

    ``save`` is atomic and refuses a sequence number that is not newer, so a stale
    writer cannot overwrite a newer checkpoint; ``load`` returns the latest state.

    Contract:

    - ``save(state)`` commits durably before returning. If the stored latest
      ``seq`` for ``(state.tenant_id, state.run_id)`` is ``>= state.seq`` it raises
      :class:`~keelgate.errors.StaleCheckpointError` and stores nothing. Of two
      concurrent saves of the same ``seq`` exactly one succeeds.
    - ``load`` returns the state with the highest ``seq``, equal (as JSON) to what was
      saved, or None. A run in another tenant is simply absent.
    - ``runs(tenant_id)`` lists that tenant's run ids, never another tenant's.
    - Optionally a :class:`~keelgate.commits.GroupedStore`: a ``commit_group`` shared
      with the other stores of one transaction lets the loop commit their writes
      together at its barriers; without one, every write commits alone.
    """

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The latest state, or None. A run in another tenant is simply absent."""
        ...

    def save(self, state: LoopState) -> None:
        """Persist state atomically. Raises :class:`StaleCheckpointError` if it is not newer."""
        ...

    def runs(self, tenant_id: str) -> list[str]:
        """The tenant's run ids, oldest first."""
        ...


@runtime_checkable
class HistoryCheckpointStore(CheckpointStore, Protocol):
    """A store that keeps every checkpoint, oldest first. Replay needs this."""

    def history(self, tenant_id: str, run_id: str) -> list[LoopState]:
        """Every checkpoint of the run, in sequence order (empty if absent)."""
        ...
