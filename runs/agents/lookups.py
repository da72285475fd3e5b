"""Asking the system of record about an unknown outcome: trusted code the agent registers.

A lookup runs on the server, with a timeout, never in the model or the tool: it reads
the downstream system by the call's idempotency key. Its answer is definite (a record:
executed, or None: not executed) or it is not an answer at all (it raised or timed out),
and then the decision stays with a person. A person's "Check" and the worker's outcome
confirmer (``Agent.auto_settle``) ask the same lookup.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from keelgate.loop import PlannedAction
from runs.agents import Agent

__all__ = ["LOOKUP_TIMEOUT_SECONDS", "LookupConfirmer", "LookupResult", "lookup_call"]

log = logging.getLogger("keelgate.lookups")

LOOKUP_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class LookupResult:
    """What the system of record said about one call."""

    verdict: Literal["executed", "not_executed", "unsure", "unavailable"]
    record: Mapping[str, Any] | None = None
    problem: str = ""
    """Why there is no answer (fixed wording: timed out, failed, no lookup)."""

    @property
    def definite(self) -> bool:
        return self.verdict in ("executed", "not_executed")


def lookup_call(
    agent: Agent,
    tool: str,
    key: str,
    arguments: Mapping[str, Any],
    *,
    timeout: float | None = None,
) -> LookupResult:
    """Ask the agent's lookup for ``tool`` about the call with idempotency key ``key``.

    ``timeout`` defaults to :data:`LOOKUP_TIMEOUT_SECONDS`."""
    timeout = LOOKUP_TIMEOUT_SECONDS if timeout is None else timeout
    lookup = agent.lookups.get(tool)
    if lookup is None:
        return LookupResult("unavailable", problem=f"{agent.name} has no lookup for {tool}.")
    # A daemon thread per lookup: one that hangs costs a thread, never the request, and
    # never holds up the process's exit (an executor's threads would be joined at exit).
    answer: list[Any] = []
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            answer.append(lookup(key, dict(arguments)))
        except Exception as exc:
            failed.append(exc)

    thread = threading.Thread(target=ask, name="keelgate-lookup", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return LookupResult("unsure", problem=f"{agent.lookup_label} did not answer within {timeout:g} s.")
    if failed or not answer:  # its failure is not an answer: the person decides
        log.warning(
            "lookup failed agent=%s tool=%s error=%s",
            agent.name,
            tool,
            type(failed[0]).__name__ if failed else "none",
        )
        return LookupResult("unsure", problem=f"Asking {agent.lookup_label} failed.")
    record = answer[0]
    if record is None:
        return LookupResult("not_executed")
    if not isinstance(record, Mapping):
        return LookupResult("unsure", problem=f"{agent.lookup_label} answered with something unreadable.")
    return LookupResult("executed", dict(record))


class LookupConfirmer:
    """The engine's OutcomeConfirmer from an agent's lookups: a definite answer settles the call."""

    name = "lookup"

    def __init__(self, agent: Agent, *, timeout: float | None = None) -> None:
        self.agent = agent
        self.timeout = timeout

    def confirm(
        self, action: PlannedAction, *, tenant_id: str, run_id: str
    ) -> Mapping[str, Any] | bool | None:
        """The downstream record (executed), False (not executed), or None (ask a person)."""
        found = lookup_call(
            self.agent, action.tool, action.idempotency_key, action.arguments, timeout=self.timeout
        )
        if found.verdict == "executed":
            return found.record
        return False if found.verdict == "not_executed" else None
