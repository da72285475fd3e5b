"""The contract every :class:`~keelgate.idempotency.IdempotencyStore` must pass.

Subclass :class:`IdempotencyStoreContract` in a test module (its name gets the ``Test``
prefix there) and define one fixture, ``make_store``, returning a zero-argument
callable. **Every call must open a new handle over the same storage**: a new connection
to the same SQLite file or database, or, for an in-memory store, the same instance. The
suite uses two handles to check durability (a second handle reads what the first
committed) and to race claims. Closing the handles is the fixture's job::

    class TestMyStore(IdempotencyStoreContract):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: MyStore(tmp_path / "keys.db")

Tests use fresh random keys, so a store whose storage outlives one test still passes.
"""

import pytest

# Before the parts are imported, so their plain asserts report values on failure.
pytest.register_assert_rewrite(
    "keelgate.testing.contract.idempotency._base",
    "keelgate.testing.contract.idempotency._claim",
    "keelgate.testing.contract.idempotency._complete",
    "keelgate.testing.contract.idempotency._get",
    "keelgate.testing.contract.idempotency._settle",
)

from keelgate.testing.contract.idempotency._base import KeyStoreFactory  # noqa: E402
from keelgate.testing.contract.idempotency._claim import ClaimContract  # noqa: E402
from keelgate.testing.contract.idempotency._complete import CompleteContract  # noqa: E402
from keelgate.testing.contract.idempotency._get import GetContract  # noqa: E402
from keelgate.testing.contract.idempotency._settle import SettleContract  # noqa: E402

__all__ = ["IdempotencyStoreContract", "KeyStoreFactory"]


class IdempotencyStoreContract(ClaimContract, CompleteContract, SettleContract, GetContract):
    """All of the idempotency store contract: claim, complete, settle and get."""
