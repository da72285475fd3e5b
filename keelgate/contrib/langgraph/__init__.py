"""LangGraph and Keelgate (``pip install keelgate[langgraph]``).

- :class:`KeelgateSaver`, :class:`AsyncKeelgateSaver`: a LangGraph checkpointer on
  Keelgate's databases, per tenant, with write ownership.
- :class:`GatedToolNode`: LangGraph's ToolNode with every call through a Keelgate
  Gateway (grants, approvals as interrupts, idempotency keys, unknown outcomes).
- :class:`LangGraphCheckpointStore`: the other way round, Keelgate's checkpoints kept in
  a LangGraph saver.
"""

from keelgate.contrib.langgraph._gated import GateDecision, GatedToolNode, tool_schemas
from keelgate.contrib.langgraph._saver import (
    AsyncKeelgateSaver,
    KeelgateSaver,
    SaverDatabase,
    Sql,
    ThreadLease,
)
from keelgate.contrib.langgraph._store import LangGraphCheckpointStore

__all__ = [
    "AsyncKeelgateSaver",
    "GateDecision",
    "GatedToolNode",
    "KeelgateSaver",
    "LangGraphCheckpointStore",
    "SaverDatabase",
    "Sql",
    "ThreadLease",
    "tool_schemas",
]
