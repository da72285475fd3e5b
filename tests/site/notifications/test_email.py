"""Email about waiting items: who gets what, one message per person, nothing twice, nothing unsafe."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.db import transaction
from django.test import Client

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from approvals.services import approval_decide
from audit.wiring import audit_log
from notifications.emails import queue_due, send_due, send_queued
from notifications.models import ChainCursor, DeliveryStatus, EmailBatch
from runs.agents.brokerage import PaperBrokerage
from tenants.models import Role
from tests.site.console.conftest import drain, start_waiting
from tests.site.notifications.mail import (
    CONSOLE,
    member,
    smtp,
    unknown_event,
    waiting_approvals,
    waiting_unknown,
)

__all__ = ["smtp"]  # the fixture, imported to be used

pytestmark = pytest.mark.django_db(transaction=True)


def test_hundred_new_approvals_make_one_message_per_approver(smtp):
    """100 approvals in one pass: one message to each of the 2 approvers listing all 100; none to the
    viewer or to an approver without an address."""
    member("big", "alice", Role.APPROVER)
    member("big", "bob", Role.APPROVER)
    member("big", "vic", Role.VIEWER)
    member("big", "nomail", Role.APPROVER, email="")
    rows = waiting_approvals("big", 100)

    assert send_due() == 2

    assert smtp.recipients() == ["alice@example.test", "bob@example.test"]
    for address in ("alice@example.test", "bob@example.test"):
        (got,) = smtp.to(address)
        assert got.mail_from == "keelgate@example.test"
        assert got.message["To"] == address
        assert got.subject == "Keelgate: 100 approvals wait for you"
        assert got.message["Auto-Submitted"] == "auto-generated"
        for row in rows:
            link = f"{CONSOLE}/#item-a-{row.pk}"
            assert f"run {row.run_id}" in got.text and link in got.text
            assert f'href="{link}"' in got.html and f">{row.run_id}</a>" in got.html
            assert f'href="{CONSOLE}/runs/big/{row.run_id}/"' in got.html
        assert got.text.count("- place_order in tenant big") == 100
        assert "100 calls wait for your approval" in got.text


def test_unknown_outcomes_go_to_reconcilers_and_admins_not_to_approvers(smtp):
    """ROLE_RANK: an unknown outcome needs a reconciler; approvals reach approvers and above."""
    member("t9", "appr", Role.APPROVER)
    member("t9", "reco", Role.RECONCILER)
    member("t9", "boss", Role.ADMIN)
    (approval,) = waiting_approvals("t9", 1)
    unknown = waiting_unknown("t9", "u-1", tool="wire_funds")

    assert send_due() == 3

    (appr,) = smtp.to("appr@example.test")
    assert appr.subject == "Keelgate: 1 approval waits for you"
    assert f"#item-a-{approval.pk}" in appr.text and "wire_funds" not in appr.text
    for name in ("reco", "boss"):
        (got,) = smtp.to(f"{name}@example.test")
        assert got.subject == "Keelgate: 1 approval and 1 unknown outcome wait for you"
        assert f"{CONSOLE}/#item-u-{unknown.pk}" in got.text
        assert "- wire_funds in tenant t9, run u-1" in got.text and "reconcile:" in got.text
        assert f"#item-a-{approval.pk}" in got.text


def test_a_second_pass_and_new_items_send_only_what_is_new(smtp):
    """Nothing is mailed twice: a second pass sends nothing; a later item is mailed alone."""
    member("t9", "alice", Role.APPROVER)
    (first,) = waiting_approvals("t9", 1, prefix="early")
    assert send_due() == 1
    assert send_due() == 0
    assert len(smtp.received) == 1

    (later,) = waiting_approvals("t9", 1, prefix="late")
    assert send_due() == 1
    last = smtp.received[-1]
    assert f"#item-a-{later.pk}" in last.text and f"#item-a-{first.pk}" not in last.text
    assert ChainCursor.objects.get(channel="email", subscriber="t9").seq == 2
    assert list(EmailBatch.objects.values_list("status", flat=True)) == [DeliveryStatus.DELIVERED] * 2


def test_an_item_decided_before_the_pass_is_not_mailed(smtp, operator, brokerage_path):
    """Two real runs wait; one is approved before the pass: the message lists only the other."""
    member("t1", "alice", Role.APPROVER)
    first = start_waiting(operator, "r1")
    second = start_waiting(operator, "r2")
    approval_decide(tenant_id="t1", approval_id=first.pk, user=operator, decision="approve")

    assert send_due() == 1
    (got,) = smtp.to("alice@example.test")
    assert f"#item-a-{second.pk}" in got.text and f"#item-a-{first.pk}" not in got.text
    assert got.subject == "Keelgate: 1 approval waits for you"


def test_items_decided_between_queueing_and_sending_are_left_out(smtp):
    """What a message lists is read when it is sent: a batch whose items were all decided sends nothing."""
    member("t9", "alice", Role.APPROVER)
    member("t9", "reco", Role.RECONCILER)
    a, b = waiting_approvals("t9", 2)
    assert queue_due() == 2
    Approval.objects.filter(pk=a.pk).update(status=ApprovalStatus.APPROVED)
    Approval.objects.filter(pk=b.pk).update(status=ApprovalStatus.DENIED)

    assert send_queued() == 0
    assert smtp.received == []
    assert set(EmailBatch.objects.values_list("status", flat=True)) == {DeliveryStatus.SKIPPED}


def test_a_person_hears_only_about_tenants_where_their_role_decides(smtp):
    """One message across a person's tenants; nothing of a tenant they are not in or only view."""
    member("ta", "both", Role.APPROVER)
    member("tb", "both", Role.APPROVER)
    member("ta", "only_a", Role.ADMIN)
    member("tb", "only_b", Role.APPROVER)
    member("tc", "only_b", Role.VIEWER)
    in_a = waiting_approvals("ta", 2, prefix="alpha")
    in_b = waiting_approvals("tb", 3, prefix="beta")
    in_c = waiting_approvals("tc", 1, prefix="gamma")

    assert send_due() == 3
    (both,) = smtp.to("both@example.test")
    assert both.subject == "Keelgate: 5 approvals wait for you"
    assert all(f"#item-a-{r.pk}" in both.text for r in in_a + in_b)
    (only_a,) = smtp.to("only_a@example.test")
    assert all(f"#item-a-{r.pk}" in only_a.text for r in in_a)
    assert "beta" not in only_a.text and "tenant tb" not in only_a.html and "gamma" not in only_a.text
    (only_b,) = smtp.to("only_b@example.test")
    assert all(f"#item-a-{r.pk}" in only_b.text for r in in_b)
    assert (
        "alpha" not in only_b.text
        and f"#item-a-{in_c[0].pk}" not in only_b.text
        and "tenant tc" not in only_b.text
    )


def test_a_person_who_lost_the_role_before_sending_is_not_told(smtp):
    """Roles are checked again at send time: demoted to viewer after queueing, the message is not sent."""
    user = member("t9", "alice", Role.APPROVER)
    waiting_approvals("t9", 1)
    assert queue_due() == 1
    member("t9", "alice", Role.VIEWER)
    assert send_queued() == 0
    assert smtp.to(user.email) == []


def test_hostile_names_are_escaped_and_arguments_and_goal_never_mailed(smtp):
    """A tool name with markup is escaped in the HTML part; arguments and the goal appear in no part."""
    member("t9", "alice", Role.RECONCILER)
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    waiting_approvals("t9", 1, tool=hostile, goal="SECRET-GOAL buy everything")
    waiting_unknown("t9", 'u"><b>x', tool=hostile)

    assert send_due() == 1
    (got,) = smtp.received
    html = got.html
    assert "<script" not in html and "<img" not in html and "<b>x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    assert "u&quot;&gt;&lt;b&gt;x" in html
    assert hostile in got.text  # plain text is not HTML: it shows the name as it is
    raw = got.message.as_string()
    assert "SECRET-ARGUMENT" not in raw and "SECRET-GOAL" not in raw
    assert set(re.findall(r"<(\w+)", html)) <= {
        "html",
        "head",
        "meta",
        "title",
        "body",
        "p",
        "h2",
        "ul",
        "li",
    } | {
        "code",
        "b",
        "a",
    }


def test_a_newline_in_a_run_id_cannot_forge_a_line(smtp):
    """Untrusted names are put on one line in the plain text part."""
    member("t9", "alice", Role.RECONCILER)
    waiting_unknown("t9", "u-1\n- approve_everything in tenant t9, run fake")
    assert send_due() == 1
    assert "\n- approve_everything" not in smtp.received[0].text


def test_inactive_users_and_users_without_an_address_get_nothing(smtp):
    """Only active people with an address are mailed."""
    member("t9", "alice", Role.ADMIN, active=False)
    member("t9", "blank", Role.ADMIN, email="")
    waiting_approvals("t9", 3)
    waiting_unknown("t9", "u-1")
    assert send_due() == 0
    assert smtp.received == []
    assert not EmailBatch.objects.exists()
    assert ChainCursor.objects.get(channel="email", subscriber="t9").seq == 4


def test_a_real_run_waiting_is_mailed_with_links_that_open_it(smtp, operator, brokerage_path):
    """The real path: a worker stops a run on its order's approval; the links open the inbox and run."""
    alice = member("t1", "alice", Role.APPROVER)
    approval = start_waiting(operator, "r1")

    assert send_due() == 1
    (got,) = smtp.to("alice@example.test")
    assert "- place_order in tenant t1, run r1" in got.text
    client = Client()
    client.force_login(alice)
    assert f"approve or deny: {CONSOLE}/#item-a-{approval.pk}" in got.text
    inbox = client.get("/")
    assert inbox.status_code == 200 and f'id="item-a-{approval.pk}"' in inbox.content.decode()
    run_link = re.search(rf"the run: {re.escape(CONSOLE)}(\S+)", got.text)
    assert run_link is not None and run_link.group(1) == "/runs/t1/r1/"
    assert client.get(run_link.group(1)).status_code == 200


def test_a_real_unknown_outcome_is_mailed_to_the_reconciler(smtp, operator, brokerage_path):
    """The real path: approved, the brokerage fails after executing: the reconciler is told, once."""
    member("t1", "rita", Role.RECONCILER)
    approval = start_waiting(operator, "u1")
    assert send_due() == 1  # rita, about the approval
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve")
    PaperBrokerage().set_mode("fail")
    try:
        drain()
    finally:
        PaperBrokerage().set_mode("normal")
    unknown = UnknownOutcome.objects.get(tenant_id="t1", run_id="u1")

    assert send_due() == 1
    assert send_due() == 0
    last = smtp.to("rita@example.test")[-1]
    assert last.subject == "Keelgate: 1 unknown outcome waits for you"
    assert f"#item-u-{unknown.pk}" in last.text and "run u1" in last.text


def test_an_event_ahead_of_its_inbox_row_is_mailed_once_the_row_commits(smtp, settings):
    """The gateway's event can commit before the projection's row: it is looked for again next pass."""
    member("t9", "reco", Role.RECONCILER)
    unknown_event("t9", "u-1", "a-u-1")
    assert send_due() == 0
    cursor = ChainCursor.objects.get(channel="email", subscriber="t9")
    assert cursor.seq == 1 and [u["run_id"] for u in cursor.held] == ["u-1"]

    row = UnknownOutcome.objects.create(
        tenant_id="t9",
        run_id="u-1",
        action_id="a-u-1",
        agent="paper-trader",
        tool="place_order",
        arguments="{}",
        idempotency_key="u-1-k",
        detected_at=datetime.now(UTC),
    )
    assert send_due() == 1
    assert f"#item-u-{row.pk}" in smtp.received[0].text
    assert ChainCursor.objects.get(channel="email", subscriber="t9").held == []
    assert send_due() == 0


def test_an_event_whose_row_never_comes_is_dropped_after_the_grace(smtp, settings):
    """After KEELGATE_EMAIL_UNRESOLVED_SECONDS the item is given up and the cursor row stays small."""
    settings.KEELGATE_EMAIL_UNRESOLVED_SECONDS = 0
    member("t9", "reco", Role.RECONCILER)
    unknown_event("t9", "u-1", "a-u-1")
    assert send_due() == 0
    assert ChainCursor.objects.get(channel="email", subscriber="t9").held == []


def test_email_off_sends_nothing_and_moves_no_cursor(smtp, settings):
    """KEELGATE_EMAIL_ENABLED off: a pass does nothing; turned on, what still waits is mailed."""
    settings.KEELGATE_EMAIL_ENABLED = False
    member("t9", "alice", Role.APPROVER)
    waiting_approvals("t9", 2)
    assert send_due() == 0
    assert not ChainCursor.objects.filter(channel="email").exists() and smtp.received == []
    settings.KEELGATE_EMAIL_ENABLED = True
    assert send_due() == 1


def test_who_already_approved_a_four_eyes_call_is_not_asked_again(smtp):
    """A first approver's vote is in: the second approval is someone else's to give."""
    member("t9", "alice", Role.APPROVER)
    member("t9", "bob", Role.APPROVER)
    (row,) = waiting_approvals("t9", 1)
    Approval.objects.filter(pk=row.pk).update(required=2, votes=[{"by": "alice", "at": "x", "note": ""}])
    assert send_due() == 1
    assert smtp.recipients() == ["bob@example.test"]
    assert EmailBatch.objects.get(user__username="alice").status == DeliveryStatus.SKIPPED


def test_an_escalated_approval_is_announced_to_its_role_only(smtp):
    """Escalated by its deadline to admin: admins hear of it again; approvers neither then nor later."""
    member("t9", "alice", Role.APPROVER)
    member("t9", "boss", Role.ADMIN)
    (row,) = waiting_approvals("t9", 1)
    assert send_due() == 2

    with transaction.atomic():
        Approval.objects.filter(pk=row.pk).update(escalated_to=Role.ADMIN)
        body = {"run_id": row.run_id, "action_id": row.action_id, "tool": row.tool, "escalated_to": "admin"}
        audit_log().append("t9", actor="expiry", kind="approval.escalated", body=body)
    assert send_due() == 1
    assert [len(smtp.to(a)) for a in ("alice@example.test", "boss@example.test")] == [1, 2]
    assert f"#item-a-{row.pk}" in smtp.to("boss@example.test")[-1].text

    (other,) = waiting_approvals("t9", 1, prefix="queued")
    assert queue_due() == 2
    Approval.objects.filter(pk=other.pk).update(escalated_to=Role.ADMIN)  # before alice's batch is sent
    assert send_queued() == 1
    assert len(smtp.to("alice@example.test")) == 1
