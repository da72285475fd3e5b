"""Model-backed planner and verifier, importable without the ``openai`` extra.

The classes here are thin: each builds its implementation when it is instantiated, from
what the ``openai`` extra provides (``keelgate.contrib.openai``'s classes, found by entry
point: ``keelgate._extras``). The core imports no contrib module, ``import keelgate.loop``
never imports ``openai``, and a missing extra is a configuration error at the point of
use. What an implementation must do is :class:`ModelPlanner` and :class:`ModelVerifier`.
"""

from __future__ import annotations

from typing import Any, Protocol

from keelgate._extras import load_extra
from keelgate.errors import ConfigurationError
from keelgate.loop._planner import ModelUsage, Plan, PlanRequest
from keelgate.loop._verifier import Verdict, VerifyRequest

__all__ = ["LLMPlanner", "LLMVerifier"]

_MISSING = "install keelgate[openai]"


class ModelPlanner(Protocol):
    """What :class:`LLMPlanner` delegates to: one model call per plan, and its prompt's size.

    Built as ``implementation(model=, base_url=, api_key=, **options)``. ``plan`` raises
    :class:`~keelgate.errors.PlannerError` (fixed wording) for every way the call fails.
    """

    async def plan(self, request: PlanRequest) -> Plan:
        """Ask the model once for the next step."""
        ...

    def estimate_tokens(self, request: PlanRequest) -> int:
        """The size of the prompt as it will be sent."""
        ...


class ModelVerifier(Protocol):
    """What :class:`LLMVerifier` delegates to: one model call per verdict, and their usage.

    Built like :class:`ModelPlanner`. ``verify`` never raises for a bad answer: it is a
    REJECT flagged ``verifier_unparseable``.
    """

    usage: list[ModelUsage]

    async def verify(self, request: VerifyRequest) -> Verdict:
        """Ask the model once and read its verdict."""
        ...


def _implementation(name: str) -> Any:
    """The class the ``openai`` extra provides as ``name``; ConfigurationError without it."""
    found = load_extra(name)
    if found is None:
        raise ConfigurationError(_MISSING)
    return found


class LLMPlanner:
    """Plans by function calling: tool calls are actions, plain text is a final answer.

    Uses ``keelgate.contrib.openai.OpenAIPlanner`` against any OpenAI-compatible
    endpoint; ``model``, ``base_url`` and ``api_key`` default to ``KEELGATE_MODEL``,
    ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``, and ``options`` (``max_tokens``,
    ``timeout``, ``max_retries``, ``client``, ...) go to it unchanged. Prices are not
    its business: pass a pricing table to the :class:`Loop`. Never both actions and an
    answer: tool calls win and the text becomes their rationale. Unknown tools and
    arguments that are not a JSON object are passed on for the gateway to refuse; a
    refusal, an unreadable response or a failed call raises
    :class:`~keelgate.errors.PlannerError`, which stops the loop with ERROR, resumable.
    Raises :class:`~keelgate.errors.ConfigurationError` when the ``openai`` extra is
    not installed.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        **options: Any,
    ) -> None:
        implementation = _implementation("openai.planner")
        self.impl: ModelPlanner = implementation(model=model, base_url=base_url, api_key=api_key, **options)

    def estimate_tokens(self, request: PlanRequest) -> int:
        """The size of the prompt as it will be sent, for the pre-call budget check."""
        return self.impl.estimate_tokens(request)

    async def plan(self, request: PlanRequest) -> Plan:
        """Ask the model once for the next step."""
        return await self.impl.plan(request)


class LLMVerifier:
    """Asks a model for a JSON verdict. Anything it cannot parse is a rejection.

    Uses ``keelgate.contrib.openai.OpenAIVerifier``, configured like
    :class:`LLMPlanner`. The model answers ``{"decision": "accept" | "revise" |
    "reject", "reasons": [...], "flags": [...]}``; any other reply, a refusal or a
    failed call is a REJECT flagged ``verifier_unparseable``. Its verdict steers the
    loop and never authorises anything. Raises
    :class:`~keelgate.errors.ConfigurationError` when the ``openai`` extra is not
    installed.

    The loop's budgets count planner calls only; :attr:`usage` lists what each
    verifier call used, for the caller's own accounting.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        **options: Any,
    ) -> None:
        implementation = _implementation("openai.verifier")
        self.impl: ModelVerifier = implementation(model=model, base_url=base_url, api_key=api_key, **options)

    async def verify(self, request: VerifyRequest) -> Verdict:
        """Ask the model once and read its verdict."""
        return await self.impl.verify(request)

    @property
    def usage(self) -> list[ModelUsage]:
        """What each verifier call used, oldest first."""
        return self.impl.usage
