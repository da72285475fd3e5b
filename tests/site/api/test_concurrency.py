"""Ten people approve one approval at once through HTTP: exactly one wins, nine get 409 naming them."""

from __future__ import annotations

import threading

from django.contrib.auth import get_user_model
from django.db import connection

from approvals.models import Approval, ApprovalStatus
from audit.selectors import audit_verify
from runs.models import Run, RunStatus
from tenants.api_keys import api_key_create
from tenants.models import Membership, Role, Tenant
from tests.site._audit import logged
from tests.site.api.conftest import Api

PEOPLE = 10


def test_ten_concurrent_approvals_settle_the_item_once(pending):
    """Threads with their own keys and connections approve together: one 200, nine 409 naming the winner."""
    tenant = Tenant.objects.get(slug="t1")
    keys = []
    for n in range(PEOPLE):
        user = get_user_model().objects.create_user(f"approver{n}", password="pw-approver-123456")
        Membership.objects.create(user=user, tenant=tenant, role=Role.APPROVER)
        keys.append(api_key_create(by="tester", tenant=tenant, user=user)[1])
    gate = threading.Barrier(PEOPLE)
    results: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def approve(key: str) -> None:
        try:
            client = Api(key)
            gate.wait(timeout=30)
            response = client.post(
                f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash, "note": "go"}
            )
            with lock:
                results.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == PEOPLE
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] + [409] * (PEOPLE - 1), results
    winner = next(body["decided_by"] for status, body in results if status == 200)
    assert winner.startswith("approver")
    for status, body in results:
        if status == 409:
            assert body == {
                "code": "approval_already_decided",
                "detail": f"That item was already settled. ({winner})",
            }
    approval = Approval.objects.get(pk=pending.pk)
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by == winner
    assert logged().filter(tenant_id="t1", kind="approval.decided").count() == 1
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED
    assert audit_verify(tenant_id="t1").ok
