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


def build_three_of_n() -> Agent:
    """paper-trader, but an order needs three distinct approvers (M-of-N, M = 3)."""
    return dataclasses.replace(
        build_agent(),
        name="three-of-n",
        policy=RequireApproval(["place_order"], approvals=3, reason="Orders need three people."),
    )


def build_admins_only() -> Agent:
    """paper-trader, but an order needs two admins: approvers' decisions do not count."""
    return dataclasses.replace(
        build_agent(),
        name="admins-only",
        policy=RequireApproval(["place_order"], approvals=2, approver_roles=("admin",)),
    )


def build_expiring() -> Agent:
    """paper-trader, but an approval expires one second after it is requested."""
    return dataclasses.replace(
        build_agent(),
        name="expiring",
        policy=RequireApproval(["place_order"], expires_after=timedelta(seconds=1)),
    )


def build_auto_settle() -> Agent:
    """paper-trader whose worker settles an unknown outcome itself when the brokerage is definite."""
    return dataclasses.replace(build_agent(), name="auto-settle", auto_settle=True)


def build_hanging_lookup() -> Agent:
    """paper-trader whose brokerage lookup never answers in time."""
    import time

    def hang(key, arguments):
        time.sleep(10)

    return dataclasses.replace(build_agent(), name="hanging-lookup", lookups={"place_order": hang})


def build_broken_lookup() -> Agent:
    """paper-trader whose brokerage lookup raises."""

    def broken(key, arguments):
        raise ConnectionError("brokerage down")

    return dataclasses.replace(build_agent(), name="broken-lookup", lookups={"place_order": broken})
