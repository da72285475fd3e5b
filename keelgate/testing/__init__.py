"""Test doubles and contract suites that users of Keelgate run against their own code."""

from keelgate.testing._fakes import (
    FrozenClock,
    Ledger,
    Quote,
    ScriptedPlanner,
    TradeOrder,
    trading_tools,
)

__all__ = [
    "FrozenClock",
    "Ledger",
    "Quote",
    "ScriptedPlanner",
    "TradeOrder",
    "trading_tools",
]
