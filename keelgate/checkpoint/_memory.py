"""A checkpoint store in a dict: the test double for :class:`CheckpointStore`."""

from __future__ import annotations

import threading

from keelgate._state import LoopState
from keelgate.errors import StaleCheckpointError

__all__ = ["InMemoryCheckpointStore"]


class InMemoryCheckpointStore:
    """Process-local. Fine for tests; it does not survive the process, so it cannot resume.

    Keeps every checkpoint (it is a :class:`HistoryCheckpointStore`). States are held
    as JSON text, not as objects, so a caller that mutates a state after saving it, or
    after loading it, cannot change what is stored. One lock makes ``save``'s
    check-then-append atomic between threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (tenant_id, run_id) -> [(seq, json)], oldest first; dict order is run order.
        self._runs: dict[tuple[str, str], list[tuple[int, str]]] = {}

    def save(self, state: LoopState) -> None:
        """Append ``state``; raise :class:`StaleCheckpointError` unless its seq is newer."""
        text = state.to_json()
        key = (state.tenant_id, state.run_id)
        with self._lock:
            history = self._runs.get(key)
            if history and history[-1][0] >= state.seq:
                latest = history[-1][0]
                raise StaleCheckpointError(detail=f"{state.run_id} seq {state.seq} <= {latest}")
            self._runs.setdefault(key, []).append((state.seq, text))

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The checkpoint with the highest seq, or None (also for another tenant's run)."""
        with self._lock:
            history = self._runs.get((tenant_id, run_id))
            text = history[-1][1] if history else None
        return None if text is None else LoopState.from_json(text)

    def runs(self, tenant_id: str) -> list[str]:
        """The tenant's run ids in the order of their first save."""
        with self._lock:
            return [run for (tenant, run) in self._runs if tenant == tenant_id]

    def history(self, tenant_id: str, run_id: str) -> list[LoopState]:
        """Every checkpoint of the run, lowest seq first (empty if absent)."""
        with self._lock:
            texts = [text for _, text in self._runs.get((tenant_id, run_id), [])]
        return [LoopState.from_json(text) for text in texts]
