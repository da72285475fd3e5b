"""Settings of the browser tests' Daphne and worker: the product's, plus a four-eyes agent."""

from keelgate_site.settings import *  # noqa: F403  (the product's settings, unchanged)
from keelgate_site.settings import KEELGATE_AGENTS

KEELGATE_AGENTS = {**KEELGATE_AGENTS, "four-eyes": "tests.browser.agents.build_four_eyes"}
