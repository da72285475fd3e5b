"""Checkpoint stores: where a run's state is saved after every step.

All of them give back the same JSON (:meth:`LoopState.to_json`), so a run can move
between them, and all of them pass :mod:`keelgate.testing.contract.checkpoint`. The
durable ones store it deflated against the run's previous checkpoint
(:class:`CheckpointCodec`).
"""

from keelgate.checkpoint._codec import CheckpointCodec, EncodedCheckpoint, StoredCheckpoint
from keelgate.checkpoint._default import default_checkpointer
from keelgate.checkpoint._memory import InMemoryCheckpointStore
from keelgate.checkpoint._protocol import CheckpointStore, HistoryCheckpointStore
from keelgate.checkpoint._sqlite import SqliteCheckpointStore

__all__ = [
    "CheckpointCodec",
    "CheckpointStore",
    "EncodedCheckpoint",
    "HistoryCheckpointStore",
    "InMemoryCheckpointStore",
    "SqliteCheckpointStore",
    "StoredCheckpoint",
    "default_checkpointer",
]
