"""Test agents: the paper trader under a four-eyes policy."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

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


def build_expiring() -> Agent:
    """paper-trader, but an approval expires one second after it is requested."""
    return dataclasses.replace(
        build_agent(),
        name="expiring",
        policy=RequireApproval(["place_order"], expires_after=timedelta(seconds=1)),
    )
