"""Fixtures for the OpenAI integration: a scripted local server and a planner pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contrib.openai._server import FakeOpenAI


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A chat-completions server on a free local port, stopped after the test."""
    fake = FakeOpenAI()
    fake.start()
    yield fake
    fake.stop()
