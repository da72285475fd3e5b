"""Settings of the browser tests' Daphne and worker: the product's, plus four-eyes and three-of-n agents."""

from keelgate_site.settings import *  # noqa: F403  (the product's settings, unchanged)
from keelgate_site.settings import KEELGATE_AGENTS

KEELGATE_AGENTS = {
    **KEELGATE_AGENTS,
    "four-eyes": "tests.browser.agents.build_four_eyes",
    "three-of-n": "tests.browser.agents.build_three_of_n",
}
