"""Planning and verifying with a model through the official ``openai`` client (``keelgate[openai]``).

Any OpenAI-compatible chat-completions endpoint works. ``keelgate.loop.LLMPlanner`` and
``keelgate.loop.LLMVerifier`` build these on demand, found by the entry points
``openai.planner`` and ``openai.verifier`` (``keelgate._extras``), so the core imports
neither this package nor ``openai``.
"""

from keelgate.contrib.openai._planner import DEFAULT_PLANNER_PROMPT, UNPARSED_ARGUMENTS, OpenAIPlanner
from keelgate.contrib.openai._verifier import DEFAULT_VERIFIER_PROMPT, OpenAIVerifier, parse_verdict

__all__ = [
    "DEFAULT_PLANNER_PROMPT",
    "DEFAULT_VERIFIER_PROMPT",
    "UNPARSED_ARGUMENTS",
    "OpenAIPlanner",
    "OpenAIVerifier",
    "parse_verdict",
]
