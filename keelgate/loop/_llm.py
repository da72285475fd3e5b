"""Model-backed planner and verifier, importable without the ``openai`` extra.

The classes here are thin: each builds its implementation from ``keelgate.contrib.openai``
when it is instantiated, so ``import keelgate.loop`` never imports ``openai`` and a
missing extra is reported as a configuration error at the point of use.
"""

from __future__ import annotations

from typing import Any, Protocol

from keelgate.errors import ConfigurationError
from keelgate.loop._planner import ModelUsage, Plan, PlanRequest
from keelgate.loop._verifier import Verdict, VerifyRequest

__all__ = ["LLMPlanner", "LLMVerifier"]

_MISSING = "install keelgate[openai]"


class _ModelPlanner(Protocol):
    async def plan(self, request: PlanRequest) -> Plan: ...

    def estimate_tokens(self, request: PlanRequest) -> int: ...


class _ModelVerifier(Protocol):
    usage: list[ModelUsage]

    async def verify(self, request: VerifyRequest) -> Verdict: ...


class LLMPlanner:
    """Plans by function calling: tool calls are actions, plain text is a final answer.

    Uses :class:`keelgate.contrib.openai.OpenAIPlanner` against any OpenAI-compatible
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
        try:
            from keelgate.contrib.openai import OpenAIPlanner
        except ImportError as exc:
            raise ConfigurationError(_MISSING) from exc
        self.impl: _ModelPlanner = OpenAIPlanner(model=model, base_url=base_url, api_key=api_key, **options)

    def estimate_tokens(self, request: PlanRequest) -> int:
        """The size of the prompt as it will be sent, for the pre-call budget check."""
        return self.impl.estimate_tokens(request)

    async def plan(self, request: PlanRequest) -> Plan:
        """Ask the model once for the next step."""
        return await self.impl.plan(request)


class LLMVerifier:
    """Asks a model for a JSON verdict. Anything it cannot parse is a rejection.

    Uses :class:`keelgate.contrib.openai.OpenAIVerifier`, configured like
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
        try:
            from keelgate.contrib.openai import OpenAIVerifier
        except ImportError as exc:
            raise ConfigurationError(_MISSING) from exc
        self.impl: _ModelVerifier = OpenAIVerifier(model=model, base_url=base_url, api_key=api_key, **options)

    async def verify(self, request: VerifyRequest) -> Verdict:
        """Ask the model once and read its verdict."""
        return await self.impl.verify(request)

    @property
    def usage(self) -> list[ModelUsage]:
        """What each verifier call used, oldest first."""
        return self.impl.usage
