"""Which durable checkpoint store a Loop gets when it is not given one."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from keelgate._extras import load_extra
from keelgate.checkpoint._protocol import CheckpointStore
from keelgate.checkpoint._sqlite import SqliteCheckpointStore

__all__ = ["default_checkpointer"]


def default_checkpointer(path: str | Path = ":memory:") -> CheckpointStore:
    """A durable store: LangGraph's SQLite saver if installed, else the standard-library one.

    The choice depends on what is installed, so pass an explicit store anywhere the two
    must agree (say, a web process and a worker sharing one file).
    """
    store_class = load_extra("langgraph.checkpointer")  # keelgate.contrib.langgraph's store
    if store_class is None:  # the extra is absent: keelgate.contrib.langgraph, or langgraph under it
        return SqliteCheckpointStore(path)
    return cast(CheckpointStore, store_class.sqlite(path))
