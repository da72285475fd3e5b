"""Which durable checkpoint store a Loop gets when it is not given one."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import cast

from keelgate.checkpoint._protocol import CheckpointStore
from keelgate.checkpoint._sqlite import SqliteCheckpointStore

__all__ = ["default_checkpointer"]

# Imported by name so that the core never imports LangGraph (and mypy never needs it).
_LANGGRAPH_MODULE = "keelgate.contrib.langgraph"


def default_checkpointer(path: str | Path = ":memory:") -> CheckpointStore:
    """A durable store: LangGraph's SQLite saver if installed, else the standard-library one.

    The choice depends on what is installed, so pass an explicit store anywhere the two
    must agree (say, a web process and a worker sharing one file).
    """
    try:
        module = importlib.import_module(_LANGGRAPH_MODULE)
    except ImportError:
        # The extra is absent: keelgate.contrib.langgraph, or langgraph under it.
        return SqliteCheckpointStore(path)
    store_class = module.LangGraphCheckpointStore
    return cast(CheckpointStore, store_class.sqlite(path))
