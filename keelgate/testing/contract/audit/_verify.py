"""Contract of verification over a log: a chain a log wrote always verifies."""

from __future__ import annotations

from keelgate.audit import GENESIS_HASH, AuditLog, verify, verify_chain
from keelgate.testing.contract.audit._base import LogContractBase, append_many, new_tenant

__all__ = ["VerifyContract"]


class VerifyContract(LogContractBase):
    """``verify`` accepts every chain the log wrote and checks exported heads."""

    def test_a_real_chain_verifies(self, log: AuditLog, tenant: str) -> None:
        """verify reports ok, every event checked, and the head as the digest."""
        events = append_many(log, tenant, 9)
        report = verify(log, tenant)
        assert report.ok
        assert (report.checked, report.head_seq, report.head_hash) == (9, 9, events[-1].hash)
        assert (report.first_bad_seq, report.reason) == (None, None)

    def test_an_empty_chain_verifies(self, log: AuditLog, tenant: str) -> None:
        """An empty chain is ok with nothing checked and the genesis hash as its head."""
        report = verify(log, tenant)
        assert (report.ok, report.checked, report.head_seq) == (True, 0, 0)
        assert report.head_hash == GENESIS_HASH

    def test_verify_chain_over_events_agrees(self, log: AuditLog, tenant: str) -> None:
        """verify_chain over events() gives the same report as verify."""
        append_many(log, tenant, 4)
        assert verify_chain(log.events(tenant), tenant_id=tenant) == verify(log, tenant)

    def test_an_earlier_exported_head_still_verifies(self, log: AuditLog, tenant: str) -> None:
        """A head exported earlier matches after more appends: history was not rewritten."""
        exported = append_many(log, tenant, 3)[-1]
        append_many(log, tenant, 3)
        report = verify(log, tenant, expect_head=(exported.seq, exported.hash))
        assert report.ok
        assert report.checked == 6

    def test_a_wrong_exported_hash_is_a_digest_mismatch(self, log: AuditLog, tenant: str) -> None:
        """An exported head whose hash differs from the stored event is digest_mismatch."""
        append_many(log, tenant, 4)
        report = verify(log, tenant, expect_head=(2, "f" * 64))
        assert (report.ok, report.reason, report.first_bad_seq) == (False, "digest_mismatch", 2)

    def test_an_exported_head_past_the_end_is_a_digest_mismatch(self, log: AuditLog, tenant: str) -> None:
        """An exported head the chain no longer reaches (truncation) is digest_mismatch."""
        events = append_many(log, tenant, 2)
        report = verify(log, tenant, expect_head=(3, events[-1].hash))
        assert (report.ok, report.reason, report.first_bad_seq) == (False, "digest_mismatch", 3)

    def test_each_tenant_verifies_on_its_own(self, log: AuditLog) -> None:
        """Two tenants' interleaved chains each verify under their own tenant id."""
        a, b = new_tenant(), new_tenant()
        for n in range(3):
            log.append(a, actor="x", kind="k", body={"n": n})
            log.append(b, actor="x", kind="k", body={"n": n})
        assert verify(log, a).ok
        assert verify(log, b).checked == 3
