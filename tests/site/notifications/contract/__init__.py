"""The contract every notification channel must pass, on the shared engine.

Subclass :class:`ChannelContract` in the channel's test module (its name gets the
``Test`` prefix there) and define one fixture, ``harness``, returning a
:class:`~tests.site.notifications.contract._base.Harness` for the channel: the channel
itself, a recipient that exists, a way to make the chain announce what the channel
wants, to make the far side refuse, and to count what it took. The suite drives the
engine (tail, claim, deliver, record) through the channel's real transport::

    class TestEmailChannel(ChannelContract):
        @pytest.fixture
        def harness(self, smtp):
            return EmailHarness(smtp)

One file per part: the chain cursor (``_tail``), claims under a lease (``_claim``),
retries with backoff (``_retry``).
"""

import pytest

# Before the parts are imported, so their plain asserts report values on failure.
pytest.register_assert_rewrite(
    "tests.site.notifications.contract._base",
    "tests.site.notifications.contract._tail",
    "tests.site.notifications.contract._claim",
    "tests.site.notifications.contract._retry",
)

from tests.site.notifications.contract._base import Harness  # noqa: E402
from tests.site.notifications.contract._claim import ClaimContract  # noqa: E402
from tests.site.notifications.contract._retry import RetryContract  # noqa: E402
from tests.site.notifications.contract._tail import TailContract  # noqa: E402

__all__ = ["ChannelContract", "Harness"]


class ChannelContract(TailContract, ClaimContract, RetryContract):
    """All of the channel contract: the chain cursor, claims under a lease, retries with backoff."""
