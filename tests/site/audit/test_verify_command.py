"""``manage.py verify_audit``, ``audit_verify`` and the admin's verify action on intact and broken logs."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.urls import reverse

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, TreeNode
from audit.selectors import audit_tenants, audit_verify
from audit.wiring import audit_log
from tests.site.audit import child_env
from tests.site.audit.test_tamper_sql import events_root

MANAGE = [sys.executable, "manage.py"]


def append(tenant_id: str, count: int) -> None:
    """Append ``count`` numbered events to a tenant through the real store."""
    log = audit_log()
    for n in range(count):
        log.append(tenant_id, actor="agent", kind="note", body={"n": n})


def break_actor(tenant_id: str, seq: int) -> None:
    """Edit one row's actor in SQL: its fields no longer give its leaf hash."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {EventRow._meta.db_table} SET actor = %s WHERE tenant_id = %s AND seq = %s",
            ["intruder", tenant_id, seq],
        )


def verify(*args: str) -> str:
    """Run ``verify_audit`` and return its stdout."""
    out = StringIO()
    call_command("verify_audit", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
class TestSelectors:
    """``audit_tenants`` and ``audit_verify`` read straight from the database."""

    def test_tenants_lists_every_chain_sorted(self) -> None:
        """Tenants with a chain are listed once each, sorted."""
        append("zeta", 2)
        append("alpha", 3)
        assert audit_tenants() == ["alpha", "zeta"]

    def test_tenants_empty_database(self) -> None:
        """With no events there are no tenants."""
        assert audit_tenants() == []

    def test_verify_reports_the_head(self) -> None:
        """An intact log verifies with its length as head and the root of its events as its hash."""
        append("acme", 4)
        report = audit_verify(tenant_id="acme")
        root = events_root("acme")
        assert (report.ok, report.checked, report.head_seq, report.head_hash) == (True, 4, 4, root)
        assert ChainHead.objects.get(tenant_id="acme").root == root

    def test_verify_unknown_tenant_is_empty_and_ok(self) -> None:
        """A tenant without events verifies as an empty chain."""
        report = audit_verify(tenant_id="nobody")
        assert report.ok and report.checked == 0

    def test_verify_streams_past_one_chunk(self) -> None:
        """A log longer than the walk's 2000-row chunk verifies whole, and a subtree hash edited
        on either side of the walk's node check is still named at its first leaf."""
        append("big", 2_100)
        report = audit_verify(tenant_id="big")
        assert (report.ok, report.head_seq, report.head_hash) == (True, 2_100, events_root("big"))
        for seq in (10, 2_050):
            node = TreeNode.objects.filter(tenant_id="big", level=0, index=seq - 1)
            kept = bytes(node.get().hash)
            node.update(hash=b"\x44" * 32)
            report = audit_verify(tenant_id="big")
            assert (report.first_bad_seq, report.reason) == (seq, "node_mismatch")
            node.update(hash=kept)
        assert audit_verify(tenant_id="big").ok


@pytest.mark.django_db
class TestCommand:
    """``verify_audit`` prints one line per tenant and fails on any broken chain."""

    def test_all_tenants_ok(self) -> None:
        """Every tenant with a chain gets an ok line; the command succeeds."""
        append("acme", 3)
        append("globex", 1)
        assert verify().splitlines() == [
            "tenant=acme events=3 head=3 ok",
            "tenant=globex events=1 head=1 ok",
        ]

    def test_one_tenant(self) -> None:
        """``--tenant`` verifies only that tenant."""
        append("acme", 3)
        append("globex", 1)
        assert verify("--tenant", "globex").splitlines() == ["tenant=globex events=1 head=1 ok"]

    def test_no_chains(self) -> None:
        """With nothing to verify the command says so and succeeds."""
        assert verify().strip() == "no audit chains"

    def test_broken_chain_fails_naming_first_bad_event(self) -> None:
        """A broken tenant gets a BROKEN line and the command raises, naming the first bad seq."""
        append("acme", 5)
        append("globex", 2)
        break_actor("acme", 4)
        break_actor("acme", 2)
        out = StringIO()
        with pytest.raises(CommandError, match=r"tenant=acme BROKEN at seq=2 reason=leaf_mismatch"):
            call_command("verify_audit", stdout=out)
        assert out.getvalue().splitlines() == [
            "tenant=acme BROKEN at seq=2 reason=leaf_mismatch",
            "tenant=globex events=2 head=2 ok",
        ]

    def test_first_broken_tenant_is_named(self) -> None:
        """With several broken tenants, the error names the first one verified."""
        append("acme", 2)
        append("globex", 3)
        break_actor("acme", 2)
        break_actor("globex", 1)
        with pytest.raises(CommandError) as caught:
            verify()
        assert "tenant=acme BROKEN at seq=2" in str(caught.value)

    def test_against_missing_file(self, tmp_path: Any) -> None:
        """``--against`` a file that does not exist is a clear command error."""
        with pytest.raises(CommandError, match="cannot read"):
            verify("--against", str(tmp_path / "missing.json"))

    def test_against_not_json(self, tmp_path: Any) -> None:
        """``--against`` a file that is not JSON is a clear command error."""
        path = tmp_path / "digest.json"
        path.write_text("not json")
        with pytest.raises(CommandError, match="is not JSON"):
            verify("--against", str(path))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestExitStatus:
    """The real ``manage.py`` process exits 0 on intact chains and non-zero on a broken one."""

    def run(self) -> subprocess.CompletedProcess[str]:
        """``manage.py verify_audit`` in a child process on the test database."""
        from django.conf import settings

        return subprocess.run(
            [*MANAGE, "verify_audit"],
            cwd=settings.BASE_DIR,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def test_intact_exits_zero(self) -> None:
        """An intact chain: exit status 0 and an ok line."""
        append("acme", 3)
        result = self.run()
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "tenant=acme events=3 head=3 ok"

    def test_broken_exits_non_zero(self) -> None:
        """A broken chain: exit status 1, the first bad event on stderr."""
        append("acme", 3)
        break_actor("acme", 2)
        result = self.run()
        assert result.returncode == 1
        assert "tenant=acme BROKEN at seq=2 reason=leaf_mismatch" in result.stdout
        assert "tenant=acme BROKEN at seq=2 reason=leaf_mismatch" in result.stderr


@pytest.mark.django_db
class TestAdmin:
    """The admin shows events read-only and verifies the selected tenants' chains."""

    changelist = "admin:audit_auditevent_changelist"

    def test_changelist_lists_events(self, admin_client: Any) -> None:
        """The changelist renders the events for a superuser."""
        append("acme", 2)
        response = admin_client.get(reverse(self.changelist))
        assert response.status_code == 200
        assert b"acme" in response.content

    def test_no_add_change_or_delete(self, admin_client: Any) -> None:
        """Even a superuser cannot add, change or delete an event through the admin."""
        append("acme", 1)
        pk = EventRow.objects.get().pk
        assert admin_client.get(reverse("admin:audit_auditevent_add")).status_code == 403
        assert admin_client.get(reverse("admin:audit_auditevent_delete", args=[pk])).status_code == 403
        response = admin_client.post(reverse("admin:audit_auditevent_change", args=[pk]), {"actor": "x"})
        assert response.status_code == 403
        assert EventRow.objects.get().actor == "agent"

    def test_no_bulk_delete_action(self, admin_client: Any) -> None:
        """The built-in delete action is not offered; only the verify action is."""
        append("acme", 1)
        response = admin_client.get(reverse(self.changelist))
        actions = dict(response.context["action_form"].fields["action"].choices)
        assert "delete_selected" not in actions
        assert "verify_chains" in actions

    def verify_selected(self, admin_client: Any, pks: list[int]) -> list[str]:
        """Run the verify action on rows ``pks`` and return the messages shown."""
        response = admin_client.post(
            reverse(self.changelist),
            {"action": "verify_chains", "_selected_action": pks},
            follow=True,
        )
        assert response.status_code == 200
        return [str(m) for m in response.context["messages"]]

    def test_action_reports_intact(self, admin_client: Any) -> None:
        """Selecting one event verifies its tenant's whole chain and reports it intact."""
        append("acme", 3)
        pk = EventRow.objects.get(tenant_id="acme", seq=1).pk
        assert self.verify_selected(admin_client, [pk]) == ["tenant=acme intact: 3 events, head seq 3"]

    def test_action_reports_first_broken_event(self, admin_client: Any) -> None:
        """A broken tenant is reported with its first bad seq; the intact one as intact."""
        append("acme", 4)
        append("globex", 2)
        break_actor("acme", 3)
        pks = list(EventRow.objects.filter(seq=1).values_list("pk", flat=True))
        assert self.verify_selected(admin_client, pks) == [
            "tenant=acme BROKEN at seq=3 reason=leaf_mismatch",
            "tenant=globex intact: 2 events, head seq 2",
        ]
