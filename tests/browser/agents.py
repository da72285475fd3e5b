"""The paper trader under a four-eyes and a three-of-n policy, for the browser tests."""

from __future__ import annotations

import dataclasses

from keelgate.gateway import RequireApproval
from runs.agents import Agent
from runs.agents.paper_trader import build_agent


def build_four_eyes() -> Agent:
    """paper-trader, but an order needs two distinct approvers."""
    return dataclasses.replace(
        build_agent(),
        name="four-eyes",
        policy=RequireApproval(["place_order"], approvers=2, reason="Large orders need two people."),
    )


def build_three_of_n() -> Agent:
    """paper-trader, but an order needs three distinct approvers (M-of-N, M = 3)."""
    return dataclasses.replace(
        build_agent(),
        name="three-of-n",
        policy=RequireApproval(["place_order"], approvals=3, reason="Orders need three people."),
    )
