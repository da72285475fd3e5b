"""ContextSource: extra context for a plan step, always dated and always untrusted."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from keelgate.errors import ConfigurationError
from keelgate.loop import ContextItem, ContextSource
from tests.conftest import act, answer, quote

PUBLISHED = datetime(2026, 10, 30, 16, 0, tzinfo=UTC)


class Memory:
    """A synchronous source returning fixed items and recording the iterations it was asked at."""

    def __init__(self, *items: object) -> None:
        self.items_ = list(items)
        self.asked: list[int] = []

    def items(self, state):
        """The fixed items."""
        self.asked.append(state.iteration)
        return self.items_


class AsyncMemory(Memory):
    """The same, answering from a coroutine."""

    async def items(self, state):
        """The fixed items, awaited."""
        return super().items(state)


def context_messages(request):
    """The context-item messages of a plan request."""
    return [m for m in request.messages if m.role == "context"]


def test_a_class_with_an_items_method_is_a_context_source():
    """ContextSource is a runtime-checkable protocol: anything with items(state) satisfies it."""
    assert isinstance(Memory(), ContextSource) and isinstance(AsyncMemory(), ContextSource)


async def test_items_reach_the_planner_as_untrusted_messages_with_their_dates(world):
    """Each item is a "context" message, untrusted, carrying its text and published_at."""
    source = Memory(ContextItem("ACME guidance raised", PUBLISHED, source="news"))
    w = world([answer("done")])
    result = await w.start(w.loop(context=[source]))
    assert result.goal_reached
    [message] = context_messages(w.planner.requests[0])
    assert (message.content, message.untrusted, message.published_at) == (
        "ACME guidance raised",
        True,
        PUBLISHED,
    )


async def test_context_items_come_after_the_trusted_framing(world):
    """The system framing is first and trusted; context items follow it, never before."""
    w = world([answer("done")])
    await w.start(w.loop(context=[Memory(ContextItem("a", PUBLISHED), ContextItem("b", PUBLISHED))]))
    messages = list(w.planner.requests[0].messages)
    assert messages[0].role == "system" and not messages[0].untrusted
    assert [m.content for m in messages[1:3]] == ["a", "b"] and all(m.untrusted for m in messages[1:3])


async def test_an_async_source_works(world):
    """items() may be a coroutine; its items are awaited and delivered like a sync source's."""
    w = world([answer("done")])
    await w.start(w.loop(context=[AsyncMemory(ContextItem("from the vector store", PUBLISHED))]))
    [message] = context_messages(w.planner.requests[0])
    assert message.content == "from the vector store" and message.untrusted


async def test_sources_are_asked_at_every_plan_step_and_their_items_are_not_kept(world):
    """Each plan step asks every source afresh; items are not written into the checkpoint."""
    source = Memory(ContextItem("fresh", PUBLISHED))
    w = world([act(quote()), answer("done")])
    result = await w.start(w.loop(context=[source, AsyncMemory(ContextItem("more", PUBLISHED))]))
    assert source.asked == [0, 1]
    assert [[m.content for m in context_messages(r)] for r in w.planner.requests] == [["fresh", "more"]] * 2
    assert "fresh" not in result.state.model_dump_json()


async def test_an_item_without_published_at_is_refused_before_the_planner_is_asked(world):
    """An undated item is a ConfigurationError raised by the run, and the planner is never called."""
    w = world([answer("done")])
    with pytest.raises(ConfigurationError, match="published_at"):
        await w.start(w.loop(context=[Memory(ContextItem("undated", None))]))  # type: ignore[arg-type]
    assert w.planner.calls == 0


@pytest.mark.parametrize("item", ["plain text", {"text": "a dict", "published_at": PUBLISHED}])
async def test_anything_but_a_context_item_is_refused(world, item):
    """A bare string or a dict is not a ContextItem: ConfigurationError, the planner is never called."""
    w = world([answer("done")])
    with pytest.raises(ConfigurationError):
        await w.start(w.loop(context=[AsyncMemory(item)]))
    assert w.planner.calls == 0
