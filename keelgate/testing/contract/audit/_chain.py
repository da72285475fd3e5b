"""Contract of a hash-chained log: every event links to the one before it.

The engine's logs chain their events (``hash = sha256(prev_hash || canonical bytes)``);
a log that hashes its events otherwise (the site's Merkle tree) runs the rest of the
contract, :class:`~keelgate.testing.contract.audit.AuditLogContract`, without this part.
"""

from __future__ import annotations

from typing import Any

from keelgate.audit import GENESIS_HASH, AuditLog, compute_hash, verify
from keelgate.testing.contract.audit._base import LogContractBase, LogFactory, append_many, new_tenant

__all__ = ["HashChainContract"]


class HashChainContract(LogContractBase):
    """Events link into one sha256 chain per tenant."""

    def test_first_event_is_seq_1_linked_to_genesis(self, log: AuditLog, tenant: str) -> None:
        """A tenant's first event has seq 1 and prev_hash GENESIS_HASH."""
        event = log.append(tenant, actor="alice", kind="run.started", body={"run": "r1"})
        assert (event.tenant_id, event.seq, event.prev_hash) == (tenant, 1, GENESIS_HASH)
        assert (event.actor, event.kind, event.body) == ("alice", "run.started", {"run": "r1"})

    def test_each_event_links_to_the_previous_hash(self, log: AuditLog, tenant: str) -> None:
        """Every event's prev_hash is the hash of the event before it."""
        events = append_many(log, tenant, 6)
        assert [event.prev_hash for event in events[1:]] == [event.hash for event in events[:-1]]

    def test_hash_is_sha256_of_prev_hash_and_canonical_bytes(self, log: AuditLog, tenant: str) -> None:
        """hash == compute_hash(prev_hash, canonical()), for every event."""
        for event in append_many(log, tenant, 3):
            assert event.hash == compute_hash(event.prev_hash, event.canonical())

    def test_two_tenants_each_chain_from_genesis(self, log: AuditLog) -> None:
        """Interleaved appends to two tenants link each tenant's events to its own."""
        a, b = new_tenant(), new_tenant()
        first_a = log.append(a, actor="x", kind="k", body={})
        first_b = log.append(b, actor="x", kind="k", body={})
        second_a = log.append(a, actor="x", kind="k", body={})
        assert first_b.prev_hash == GENESIS_HASH
        assert second_a.prev_hash == first_a.hash

    def test_a_new_handle_continues_the_chain(self, make_log: LogFactory, tenant: str) -> None:
        """A reopened log links its next event to the head it finds."""
        last = append_many(make_log(), tenant, 4)[-1]
        following = make_log().append(tenant, actor="a", kind="k", body={})
        assert following.prev_hash == last.hash
        assert verify(make_log(), tenant).checked == 5

    def test_integers_beyond_a_double_round_trip(self, log: AuditLog, tenant: str) -> None:
        """A chain hashes its own canonical JSON, which carries any integer exactly."""
        body: dict[str, Any] = {"big": 2**62, "neg": -(2**62)}
        log.append(tenant, actor="a", kind="k", body=body)
        assert [event.body for event in log.events(tenant)] == [body]
