"""Agents: a planner, tools, grants, an approval policy and a verifier, registered by name.

``settings.KEELGATE_AGENTS`` maps a name to the dotted path of a factory returning an
:class:`Agent`. The worker and the web process build the same agent from its name, so
a decision taken in the console uses the very policy the worker runs under.

An app above ``runs`` may own a family of agents a tenant defines at run time (the MCP
gateway's ``mcp:<upstream>``): it registers a source for their prefix in its
``AppConfig.ready()`` (:func:`register_agent_source`), and :func:`load_agent` asks it,
with the tenant, for a name of that prefix. ``runs`` never imports that app.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from keelgate.errors import ConfigurationError, KeelgateError, PlannerError
from keelgate.gateway import ApprovalPolicy, Tool
from keelgate.loop import OutcomeConfirmer, Plan, Planner, PlanRequest, StopConditions, Verifier
from sitekit.errors import UnknownAgentError

Lookup = Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None]
"""``lookup(idempotency_key, arguments)``: the downstream record of that call, or None when
the system of record has none (it definitely did not happen). Raises when it cannot tell."""


@dataclass(frozen=True)
class Agent:
    """Everything the harness needs to run one kind of agent."""

    name: str
    planner: Planner
    tools: Sequence[Tool]
    grants: Sequence[str]
    policy: ApprovalPolicy | None = None
    verifier: Verifier | None = None
    stop: StopConditions | None = None
    confirmer: OutcomeConfirmer | None = None
    validate_goal: Callable[[str], None] = field(default=lambda goal: None)
    """Raises :class:`GoalNotUnderstoodError` for a goal the agent cannot work with."""
    lookups: Mapping[str, Lookup] = field(default_factory=dict)
    """Per WRITE tool, trusted code that asks the system of record about a call by its
    idempotency key (see :mod:`runs.agents.lookups`): the "Check" button of an unknown
    outcome, and with ``auto_settle`` the worker's outcome confirmer."""
    lookup_label: str = "the system of record"
    """What the lookups ask, in words ("the brokerage")."""
    auto_settle: bool = False
    """Let the worker settle an unknown outcome itself when a lookup is definite (audited
    as source ``confirmer``); off, a person always records it."""
    done_words: Mapping[str, str] = field(default_factory=dict)
    """Per WRITE tool, what a call that ran means, in words for the runs list ("order
    filled"); without an entry the list says "<tool> done"."""
    upstream: str = ""
    """The remote server its tools forward to (an MCP upstream's name), shown on inbox
    cards with the tool's description; "" for an agent whose tools are its own code."""
    graph: Callable[[Any], Any] | None = None
    """A LangGraph agent: ``graph(tools_node)`` returns its (uncompiled) ``StateGraph``, given a
    ``GatedToolNode`` over ``tools``, ``grants`` and ``policy``; the worker runs it on the
    site's saver (``runs.engine.graphs``) and ``planner`` is not used (:data:`PLANNED_IN_GRAPH`)."""


class _PlannedInGraph:
    """The planner of a graph agent: its graph's model plans; the loop never asks this one."""

    def plan(self, request: PlanRequest) -> Plan:
        """Refuse: a graph agent is driven by its graph, never by the loop's planner."""
        raise PlannerError("a graph agent plans inside its graph")


PLANNED_IN_GRAPH: Planner = _PlannedInGraph()
"""The ``planner`` of an :class:`Agent` whose ``graph`` is set."""


AgentSource = Callable[[str, str | None], Agent]
"""``source(name, tenant_id)``: the agent of that name in that tenant; raises
:class:`~sitekit.errors.UnknownAgentError` for one it does not know."""

_sources: dict[str, AgentSource] = {}


def register_agent_source(prefix: str, source: AgentSource) -> None:
    """Let ``source`` build every agent named ``<prefix>:...`` (called in ``AppConfig.ready()``)."""
    _sources[prefix] = source


def agent_names() -> list[str]:
    """The registered agent names."""
    return sorted(settings.KEELGATE_AGENTS)


def load_agent(name: str, *, tenant_id: str | None = None) -> Agent:
    """Build the agent registered as ``name`` (one of a registered source's: in ``tenant_id``)."""
    prefix, sep, _ = name.partition(":")
    source = _sources.get(prefix) if sep else None
    if source is not None:
        return source(name, tenant_id)
    path = settings.KEELGATE_AGENTS.get(name)
    if path is None:
        raise UnknownAgentError(name)
    factory = import_string(path)
    agent = factory()
    if not isinstance(agent, Agent):
        raise ConfigurationError(f"{path} did not return an Agent")
    return agent


def is_graph(agent: str) -> bool:
    """True if the registered agent is a LangGraph graph (cached: the worker asks per run)."""
    path = settings.KEELGATE_AGENTS.get(agent)
    return path is not None and _is_graph(path, agent)


@functools.lru_cache(maxsize=128)
def _is_graph(path: str, agent: str) -> bool:
    return load_agent(agent).graph is not None


def lookup_label(agent: str, tool: str) -> str | None:
    """What the agent's lookup for ``tool`` asks ("the brokerage"), or None without one."""
    path = settings.KEELGATE_AGENTS.get(agent)
    return None if path is None else _lookup_label(path, agent, tool)


@functools.lru_cache(maxsize=128)
def _lookup_label(path: str, agent: str, tool: str) -> str | None:
    spec = load_agent(agent)
    return spec.lookup_label if tool in spec.lookups else None


def done_words(agent: str, tool: str) -> str:
    """What a call of ``tool`` that ran means, in the agent's words ("order filled")."""
    path = settings.KEELGATE_AGENTS.get(agent)
    words = None if path is None else _done_words(path, agent, tool)
    return words or f"{tool} done"


@functools.lru_cache(maxsize=128)
def _done_words(path: str, agent: str, tool: str) -> str | None:
    return load_agent(agent).done_words.get(tool)


@dataclass(frozen=True)
class ToolCard:
    """What an inbox card shows of a tool besides the call itself."""

    schema: dict[str, Any]
    """The JSON schema of its arguments: the "edit, then approve" form."""
    description: str = ""
    """The tool's own words (untrusted when ``upstream`` is set: the upstream wrote them)."""
    upstream: str = ""
    """The agent's :attr:`Agent.upstream`, or ""."""


def tool_card(agent: str, tool: str, *, tenant_id: str | None = None) -> ToolCard | None:
    """The card facts of an agent's tool (None: no such tool; UnknownAgentError: no such agent).

    Built once per agent registration and tool, since an agent's factory may open its
    downstream systems. An agent of a registered source (``mcp:<upstream>``) is the
    tenant's and changes at run time, so it is built afresh.
    """
    prefix, sep, _ = agent.partition(":")
    if sep and prefix in _sources:
        return _card_of(load_agent(agent, tenant_id=tenant_id), tool)
    path = settings.KEELGATE_AGENTS.get(agent)
    return None if path is None else _tool_card(path, agent, tool)


class ToolCards:
    """:func:`tool_card` for one page of cards: each agent is built at most once.

    An agent of a registered source (``mcp:<upstream>``) is read from the database each
    time it is built; a page of forty cards of one upstream reads it once.
    """

    def __init__(self) -> None:
        self._agents: dict[tuple[str, str | None], Agent | KeelgateError] = {}

    def card(self, agent: str, tool: str, *, tenant_id: str | None = None) -> ToolCard | None:
        """As :func:`tool_card`."""
        prefix, sep, _ = agent.partition(":")
        if not (sep and prefix in _sources):
            return tool_card(agent, tool, tenant_id=tenant_id)
        key = (agent, tenant_id)
        if key not in self._agents:
            try:
                self._agents[key] = load_agent(agent, tenant_id=tenant_id)
            except KeelgateError as error:
                self._agents[key] = error
        built = self._agents[key]
        if isinstance(built, KeelgateError):
            raise built
        return _card_of(built, tool)


def tool_schema(agent: str, tool: str, *, tenant_id: str | None = None) -> dict[str, Any] | None:
    """The JSON schema of an agent's tool arguments (None: no such agent or tool)."""
    prefix, sep, _ = agent.partition(":")
    if not (sep and prefix in _sources) and agent not in settings.KEELGATE_AGENTS:
        return None
    card = tool_card(agent, tool, tenant_id=tenant_id)
    return None if card is None else card.schema


def _card_of(spec: Agent, tool: str) -> ToolCard | None:
    for candidate in spec.tools:
        if candidate.name == tool:
            schema: dict[str, Any] = candidate.arguments.model_json_schema()
            return ToolCard(schema=schema, description=candidate.description, upstream=spec.upstream)
    return None


@functools.lru_cache(maxsize=128)
def _tool_card(path: str, agent: str, tool: str) -> ToolCard | None:
    return _card_of(load_agent(agent), tool)
