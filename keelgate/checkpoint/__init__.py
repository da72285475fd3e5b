"""Checkpoint stores: where a run's state is saved after every step.

All of them hold the same JSON (:meth:`LoopState.to_json`), so a run can move
between them, and all of them pass :mod:`keelgate.testing.contract.checkpoint`.
"""

from keelgate.checkpoint._default import default_checkpointer
from keelgate.checkpoint._memory import InMemoryCheckpointStore
from keelgate.checkpoint._protocol import CheckpointStore, HistoryCheckpointStore
from keelgate.checkpoint._sqlite import SqliteCheckpointStore

__all__ = [
    "CheckpointStore",
    "HistoryCheckpointStore",
    "InMemoryCheckpointStore",
    "SqliteCheckpointStore",
    "default_checkpointer",
]
