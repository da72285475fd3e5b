"""How an idempotency key is derived from a tool call."""

from __future__ import annotations

import pytest

from keelgate.idempotency import derive_key

ARGS = {"sku": "A-1", "qty": 2, "ship": {"city": "Oslo", "zip": "0150"}}


def test_key_has_prefix_and_is_hex() -> None:
    """A key is ``kg_`` followed by lowercase hex."""
    key = derive_key("t", "r", "place_order", ARGS)
    assert key.startswith("kg_")
    assert len(key) > len("kg_") + 32
    int(key.removeprefix("kg_"), 16)


def test_key_is_stable_across_argument_order() -> None:
    """Arguments built in a different order, at any depth, give the same key."""
    reordered = {"ship": {"zip": "0150", "city": "Oslo"}, "qty": 2, "sku": "A-1"}
    assert derive_key("t", "r", "place_order", ARGS) == derive_key("t", "r", "place_order", reordered)


def test_key_is_deterministic_across_calls() -> None:
    """The same call always gives the same key, so a resumed run hits its old claim."""
    assert derive_key("t", "r", "x", ARGS) == derive_key("t", "r", "x", dict(ARGS))


@pytest.mark.parametrize(
    ("tenant", "run", "tool", "args"),
    [
        ("t2", "r", "place_order", ARGS),
        ("t", "r2", "place_order", ARGS),
        ("t", "r", "cancel_order", ARGS),
        ("t", "r", "place_order", {**ARGS, "qty": 3}),
        ("t", "r", "place_order", {**ARGS, "note": None}),
    ],
    ids=["tenant", "run", "tool", "argument value", "extra argument"],
)
def test_key_differs_per_tenant_run_tool_and_arguments(
    tenant: str, run: str, tool: str, args: dict[str, object]
) -> None:
    """Changing the tenant, the run, the tool or any argument changes the key."""
    assert derive_key(tenant, run, tool, args) != derive_key("t", "r", "place_order", ARGS)


def test_fields_cannot_be_shifted_into_each_other() -> None:
    """Moving text between tenant and run does not produce the same key."""
    assert derive_key("ab", "c", "x", {}) != derive_key("a", "bc", "x", {})


def test_attempt_zero_is_the_default() -> None:
    """attempt=0 gives the same key as no attempt at all."""
    assert derive_key("t", "r", "x", ARGS, attempt=0) == derive_key("t", "r", "x", ARGS)


def test_each_attempt_gets_a_fresh_key() -> None:
    """Attempts 0, 1 and 2 of the same call get three different keys, each stable."""
    keys = [derive_key("t", "r", "x", ARGS, attempt=n) for n in range(3)]
    assert len(set(keys)) == 3
    assert keys == [derive_key("t", "r", "x", ARGS, attempt=n) for n in range(3)]


def test_negative_attempt_is_refused() -> None:
    """A negative attempt is a programming error, not a new key."""
    with pytest.raises(ValueError, match="attempt"):
        derive_key("t", "r", "x", ARGS, attempt=-1)
