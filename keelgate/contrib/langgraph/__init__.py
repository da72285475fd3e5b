"""Keelgate checkpoints in LangGraph's checkpoint savers (``pip install keelgate[langgraph]``)."""

from keelgate.contrib.langgraph._store import LangGraphCheckpointStore

__all__ = ["LangGraphCheckpointStore"]
