"""Test doubles and contract suites that users of Keelgate run against their own code."""

from keelgate.loop._failpoints import Failpoints
from keelgate.testing._fakes import (
    FrozenClock,
    Ledger,
    Quote,
    ScriptedPlanner,
    TradeOrder,
    trading_tools,
)

__all__ = [
    "Failpoints",
    "FrozenClock",
    "Ledger",
    "Quote",
    "ScriptedPlanner",
    "TradeOrder",
    "trading_tools",
]
