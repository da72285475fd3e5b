"""The contract every :class:`~keelgate.checkpoint.CheckpointStore` must pass.

Subclass :class:`CheckpointStoreContract` (or :class:`HistoryCheckpointStoreContract`
for a store that keeps every checkpoint) in a test module, where its name gets the
``Test`` prefix, and define one fixture, ``make_store``, returning a zero-argument
callable. **Every call must open a new handle over the same storage**: a new connection
to the same SQLite file or database, or, for an in-memory store, the same instance. The
suite uses a second handle to check durability (it reads what the first committed) and
to race writers. Closing the handles is the fixture's job::

    class TestMyStore(HistoryCheckpointStoreContract):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: MyStore(tmp_path / "checkpoints.db")

Tests use fresh random tenant ids, so a store whose storage outlives one test still
passes.
"""

import pytest

# Before the parts are imported, so their plain asserts report values on failure.
pytest.register_assert_rewrite(
    "keelgate.testing.contract.checkpoint._base",
    "keelgate.testing.contract.checkpoint._save",
    "keelgate.testing.contract.checkpoint._load",
    "keelgate.testing.contract.checkpoint._runs",
    "keelgate.testing.contract.checkpoint._history",
)

from keelgate.testing.contract.checkpoint._base import (  # noqa: E402
    CheckpointStoreFactory,
    HistoryStoreFactory,
)
from keelgate.testing.contract.checkpoint._history import HistoryContract  # noqa: E402
from keelgate.testing.contract.checkpoint._load import LoadContract  # noqa: E402
from keelgate.testing.contract.checkpoint._runs import RunsContract  # noqa: E402
from keelgate.testing.contract.checkpoint._save import SaveContract  # noqa: E402

__all__ = [
    "CheckpointStoreContract",
    "CheckpointStoreFactory",
    "HistoryCheckpointStoreContract",
    "HistoryStoreFactory",
]


class CheckpointStoreContract(SaveContract, LoadContract, RunsContract):
    """All of the checkpoint store contract: save, load and runs."""


class HistoryCheckpointStoreContract(CheckpointStoreContract, HistoryContract):
    """The checkpoint store contract plus ``history``, for stores that keep every checkpoint."""
