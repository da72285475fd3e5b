"""The contract every :class:`~keelgate.audit.AuditLog` must pass.

Subclass :class:`ChainedAuditLogContract` (a hash-chained log, as the engine's are) or
:class:`AuditLogContract` (a log whose events are hashed otherwise, overriding
``log_verifies``) in a test module (its name gets the ``Test`` prefix
there) and define one fixture, ``make_log``, returning a zero-argument callable.
**Every call must open a new handle over the same storage**: a new connection to the
same SQLite file or database, or, for an in-memory log, the same instance. The suite
uses several handles to check durability (a new handle reads what another committed)
and to race appends from threads. Closing the handles is the fixture's job::

    class TestMyLog(AuditLogContract):
        @pytest.fixture
        def make_log(self, tmp_path):
            return lambda: MyLog(tmp_path / "audit.db")

Tests use fresh random tenant ids, so a log whose storage outlives one test still passes.
"""

import pytest

# Before the parts are imported, so their plain asserts report values on failure.
pytest.register_assert_rewrite(
    "keelgate.testing.contract.audit._base",
    "keelgate.testing.contract.audit._append",
    "keelgate.testing.contract.audit._chain",
    "keelgate.testing.contract.audit._events",
    "keelgate.testing.contract.audit._head",
    "keelgate.testing.contract.audit._verify",
)

from keelgate.testing.contract.audit._append import AppendContract  # noqa: E402
from keelgate.testing.contract.audit._base import LogFactory  # noqa: E402
from keelgate.testing.contract.audit._chain import HashChainContract  # noqa: E402
from keelgate.testing.contract.audit._events import EventsContract  # noqa: E402
from keelgate.testing.contract.audit._head import HeadContract  # noqa: E402
from keelgate.testing.contract.audit._verify import VerifyContract  # noqa: E402

__all__ = ["AuditLogContract", "ChainedAuditLogContract", "LogFactory"]


class AuditLogContract(AppendContract, EventsContract, HeadContract):
    """What every audit log does: append, events and head, verified by the log's own
    verifier (``log_verifies``)."""


class ChainedAuditLogContract(AuditLogContract, HashChainContract, VerifyContract):
    """All of it for a hash-chained log (the engine's): the chain's links and ``verify``."""
