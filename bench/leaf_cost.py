"""CPU per tree leaf: ``keelgate.audit.leaf_bytes`` against the rfc8785 package alone.

``python -m bench.leaf_cost``. Every audit event becomes a Merkle leaf, its leaf object
in RFC 8785 (JCS) bytes. ``leaf_bytes`` writes them with json's C encoder when the
object holds nothing on which the two differ (no float, no integer beyond ±(2**53 - 1),
no key above U+FFFF) and with ``rfc8785.dumps`` (pure Python) otherwise. This times,
per leaf, over the leaf objects of a real step's six events (bench 4's templates):

- ``rfc8785``: ``rfc8785.dumps``, what ``leaf_bytes`` ran for every leaf before;
- ``leaf_bytes``: the encoder it picks (here json's, the bodies holding no float);
- ``leaf_bytes, float``: the same leaves with a float in the body: the check's cost on
  top of ``rfc8785.dumps``, where it falls back.

Cases alternate in rotated rounds (``bench._common.interleave``); each figure is the
median over rounds. Not part of ``make bench``; figures on
``docs/performance.md#tree-leaves``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rfc8785

from bench._common import interleave, median, progress, scratch
from bench.audit_chain import _template_events
from keelgate.audit import leaf_bytes, leaf_object

ROUNDS = 7
PER_BATCH = 20_000


def _leaves(root: Path) -> list[dict[str, Any]]:
    return [
        leaf_object(
            version=2,
            tenant_id="bench",
            seq=1000 + i,
            at="2026-01-01T09:30:00.000000+00:00",
            actor=actor,
            kind=kind,
            body=body,
        )
        for i, (actor, kind, body) in enumerate(_template_events(root))
    ]


def _per_leaf(encode: Callable[[Any], bytes], leaves: list[dict[str, Any]]) -> Callable[[], float]:
    batch = (leaves * (PER_BATCH // len(leaves) + 1))[:PER_BATCH]

    def run() -> float:
        started = time.process_time()
        for leaf in batch:
            encode(leaf)
        return (time.process_time() - started) / len(batch) * 1e6

    return run


def main() -> None:
    with scratch("leaf_cost") as root:
        leaves = _leaves(root)
    with_float = [{**leaf, "body": {**leaf["body"], "price": 101.25}} for leaf in leaves]
    for leaf in leaves + with_float:
        assert leaf_bytes(leaf) == rfc8785.dumps(leaf)
    progress(f"{len(leaves)} leaf objects, {PER_BATCH} encodes per case per round, {ROUNDS} rounds")
    cases = {
        "rfc8785": _per_leaf(rfc8785.dumps, leaves),
        "leaf_bytes": _per_leaf(leaf_bytes, leaves),
        "rfc8785, float": _per_leaf(rfc8785.dumps, with_float),
        "leaf_bytes, float": _per_leaf(leaf_bytes, with_float),
    }
    values = interleave("leaf bytes", cases, rounds=ROUNDS)
    for name, rounds in values.items():
        spread = f"rounds {min(rounds):.2f} to {max(rounds):.2f}"
        print(f"{name:18s} {median(rounds):6.2f} us CPU per leaf ({spread})")
    ratio = median(values["rfc8785"]) / median(values["leaf_bytes"])
    print(f"leaf_bytes is {ratio:.1f}x faster than rfc8785 on these leaves")


if __name__ == "__main__":
    main()
