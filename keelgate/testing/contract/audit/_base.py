"""Shared fixtures and helpers of the audit log contract."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from keelgate.audit import AuditEvent, AuditLog, verify

__all__ = ["LogContractBase", "LogFactory", "append_many", "new_tenant"]

LogFactory = Callable[[], AuditLog]
"""Opens a handle on the log under test; every call opens one over the same storage."""


def new_tenant() -> str:
    """A tenant no other test uses, so logs whose storage outlives one test still pass."""
    return f"kg_contract_{uuid.uuid4().hex}"


def append_many(
    log: AuditLog, tenant_id: str, count: int, *, actor: str = "agent", kind: str = "note"
) -> list[AuditEvent]:
    """Append ``count`` events whose bodies number them from 0, and return them."""
    return [log.append(tenant_id, actor=actor, kind=kind, body={"n": n}) for n in range(count)]


class LogContractBase:
    """Declares the fixtures every part of the contract uses."""

    @pytest.fixture
    def make_log(self) -> LogFactory:
        """Overridden by the subclass: see :class:`AuditLogContract`."""
        raise NotImplementedError("subclasses of AuditLogContract define make_log")

    @pytest.fixture
    def log(self, make_log: LogFactory) -> AuditLog:
        """One handle on the log under test."""
        return make_log()

    def log_verifies(self, log: AuditLog, tenant_id: str) -> bool:
        """Whether the log's own verification accepts the tenant's whole history.

        A hash chain is walked with :func:`keelgate.audit.verify`; a store whose events
        are hashed otherwise (the site's Merkle tree) overrides this with its verifier.
        """
        return verify(log, tenant_id).ok

    @pytest.fixture
    def tenant(self) -> str:
        """A fresh tenant for this test."""
        return new_tenant()
