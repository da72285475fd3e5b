"""Links to decide from an email: opening one decides nothing; its recipient decides once, on a
confirmation page, through the console's service; anyone else, or a second use, is refused and audited."""

from __future__ import annotations

import html
import json
import logging
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from audit.models import AuditEvent
from notifications.emails import send_due
from notifications.emails.links import TOKEN_PREFIX, token_hash
from notifications.models import DecisionLink, EmailBatch
from runs.models import Run, RunStatus
from sitekit.logs import JsonFormatter, TextFormatter, redact_text, redact_url
from tenants.models import Membership, Role
from tests.site._audit import logged
from tests.site.console.conftest import start_waiting
from tests.site.notifications.mail import CONSOLE, member, smtp, waiting_unknown

__all__ = ["smtp"]  # the fixture, imported to be used

pytestmark = pytest.mark.django_db(transaction=True)

LINE = re.compile(rf"or from here \(for you alone, works once\): {re.escape(CONSOLE)}(/link/(\S+)/)")


def links_in(received) -> list[str]:
    """The paths of the decision links in a message's plain text part, in its order."""
    return [m.group(1) for m in LINE.finditer(received.text)]


def mailed_link(smtp, address: str) -> str:
    """The one decision link of the last message to ``address``."""
    (path,) = links_in(smtp.to(address)[-1])
    return path


def logged_in(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def post(client: Client, path: str, **data: str):
    """Post the page's form as a browser would: the CSRF token from the page's cookie."""
    client.get("/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    return client.post(path, {"csrfmiddlewaretoken": token, **data})


def events(kind: str) -> list[AuditEvent]:
    """The numbered events of ``kind`` (on PostgreSQL, once the pending ones are numbered)."""
    return list(logged().filter(kind=kind).order_by("seq"))


def body(event: AuditEvent) -> dict:
    return event.body if isinstance(event.body, dict) else json.loads(event.body)


@pytest.fixture
def alice_waits(smtp, operator, brokerage_path):
    """Run r1 of t1 waits for approval; approvers alice and bob were mailed, each with a link."""
    alice = member("t1", "alice", Role.APPROVER)
    bob = member("t1", "bob", Role.APPROVER)
    member("t1", "op", Role.ADMIN)  # gives op an address
    approval = start_waiting(operator, "r1")
    assert send_due() == 3  # alice, bob and op (admin)
    return {"alice": alice, "bob": bob, "op": operator, "approval": approval}


def test_each_approver_gets_a_link_of_their_own_and_only_its_hash_is_stored(alice_waits, smtp):
    """One link per recipient and approval; the row holds the token's sha256, the recipient, the call."""
    approval = alice_waits["approval"]
    paths = {name: mailed_link(smtp, f"{name}@example.test") for name in ("alice", "bob", "op")}
    assert len(set(paths.values())) == 3
    for name, path in paths.items():
        token = path.split("/")[2]
        assert token.startswith(TOKEN_PREFIX) and len(token) >= 40
        row = DecisionLink.objects.get(token_hash=token_hash(token))
        assert row.user.get_username() == name
        assert row.approval_id == approval.pk and row.arguments_hash == approval.arguments_hash
        assert row.used_at is None and row.expires_at > timezone.now() + timedelta(hours=71)
        assert not DecisionLink.objects.filter(token_hash=token).exists()
    got = smtp.to("alice@example.test")[-1]
    assert f'href="{CONSOLE}{paths["alice"]}"' in got.html
    assert f"approve or deny: {CONSOLE}/#item-a-{approval.pk}" in got.text  # the inbox link stays


def test_opening_a_link_changes_nothing(alice_waits, smtp):
    """GET, anonymous or as the recipient, again and again: no decision, the link unused, no event."""
    path = mailed_link(smtp, "alice@example.test")
    approval = alice_waits["approval"]
    before = logged().count()

    anonymous = Client().get(path)
    assert anonymous.status_code == 302
    assert (
        anonymous.headers["Location"].startswith("/login/?next=") and "kgl_" in anonymous.headers["Location"]
    )

    client = logged_in(alice_waits["alice"])
    for _ in range(3):
        page = client.get(path)
        assert page.status_code == 200
    text = page.content.decode()
    assert "place_order" in text and "r1" in text and 'method="post"' in text
    assert html.escape('"quantity": 10') in text  # the arguments, escaped
    assert "What it will do:" in text and "Deadline" in text
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert DecisionLink.objects.filter(used_at__isnull=False).count() == 0
    assert logged().count() == before


def test_a_visitor_logs_in_as_the_recipient_and_lands_on_the_page(alice_waits, smtp):
    """Anonymous: to the login page with ``next``; logged in there as alice, back on her link's page."""
    path = mailed_link(smtp, "alice@example.test")
    client = Client()
    to_login = client.get(path)
    assert to_login.status_code == 302
    assert client.get(to_login.headers["Location"]).status_code == 200
    logged = client.post(to_login.headers["Location"], {"username": "alice", "password": "pw-mail-123456"})
    assert logged.status_code == 302 and logged.headers["Location"] == path
    page = client.get(path)
    assert page.status_code == 200 and "place_order" in page.content.decode()


def test_the_recipient_decides_once_through_the_console_service(alice_waits, smtp):
    """A POST with the page's CSRF token approves as alice, via email; a second use is refused (410)."""
    path = mailed_link(smtp, "alice@example.test")
    approval = alice_waits["approval"]
    client = logged_in(alice_waits["alice"])

    assert client.post(path, {"decision": "approve"}).status_code == 403  # no CSRF token: nothing
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING

    done = post(client, path, decision="approve", note="fine")
    assert done.status_code == 200
    assert "Approved place_order in run r1: the run is queued." in done.content.decode()
    decided = Approval.objects.get(pk=approval.pk)
    assert decided.status == ApprovalStatus.APPROVED and decided.decided_by == "alice"
    assert Run.objects.get(tenant_id="t1", run_id="r1").status == RunStatus.QUEUED
    link = DecisionLink.objects.get(user=alice_waits["alice"])
    assert link.used_at is not None and link.decision == "approve"
    (event,) = events("approval.decided")
    said = body(event)
    assert event.actor == "alice" and said["via"] == "email" and said["link_id"] == str(link.pk)
    assert said["arguments_hash"] == link.arguments_hash and said["note"] == "fine"

    again = post(client, path, decision="deny", note="changed my mind")
    assert again.status_code == 410 and "used already" in again.content.decode()
    assert client.get(path).status_code == 410
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
    refusals = [body(e) for e in events("approval.link_refused")]
    assert [r["reason"] for r in refusals] == ["used"]  # the second post; opening it again is no attempt
    assert refusals[0]["recipient"] == "alice" and refusals[0]["link_id"] == link.pk


def test_a_forwarded_link_does_nothing_for_someone_else(alice_waits, smtp):
    """bob (an approver too) opens alice's link: 403, nothing of the call shown, audited; his own works."""
    alices = mailed_link(smtp, "alice@example.test")
    approval = alice_waits["approval"]
    bob = logged_in(alice_waits["bob"])

    page = bob.get(alices)
    assert page.status_code == 403
    text = page.content.decode()
    assert "sent to someone else" in text
    assert "place_order" not in text and "r1" not in text and "ACME" not in text and "alice" not in text
    refused = post(bob, alices, decision="approve")
    assert refused.status_code == 403 and "place_order" not in refused.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert DecisionLink.objects.get(user=alice_waits["alice"]).used_at is None
    refusals = events("approval.link_refused")
    assert [(e.actor, body(e)["reason"], body(e)["recipient"]) for e in refusals] == [
        ("bob", "not_yours", "alice"),
        ("bob", "not_yours", "alice"),
    ]

    assert post(bob, mailed_link(smtp, "bob@example.test"), decision="approve").status_code == 200
    assert Approval.objects.get(pk=approval.pk).decided_by == "bob"


def test_unknown_and_altered_links_are_404_and_expired_ones_410(alice_waits, smtp, settings):
    """A token changed by one character, or made up, finds nothing; past its lifetime or the call's
    deadline, a link is expired; neither decides anything."""
    path = mailed_link(smtp, "alice@example.test")
    client = logged_in(alice_waits["alice"])
    token = path.split("/")[2]
    altered = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in (f"/link/{altered}/", "/link/kgl_made-up/", "/link/nothing/"):
        page = client.get(bad)
        assert page.status_code == 404 and "not known" in page.content.decode()
        assert post(client, bad, decision="approve").status_code == 404

    link = DecisionLink.objects.get(user=alice_waits["alice"])
    DecisionLink.objects.filter(pk=link.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get(path).status_code == 410
    assert post(client, path, decision="approve").status_code == 410
    assert "expired" in client.get(path).content.decode()

    approval = alice_waits["approval"]
    DecisionLink.objects.filter(pk=link.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get(path).status_code == 410
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING  # the sweeper's to expire
    assert not events("approval.decided") and not events("approval.link_refused")


def test_a_call_decided_in_the_console_first_is_said_so(alice_waits, smtp):
    """op approves in the console; alice's link then says who decided it and offers the console (409)."""
    path = mailed_link(smtp, "alice@example.test")
    approval = alice_waits["approval"]
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=alice_waits["op"], decision="approve")
    client = logged_in(alice_waits["alice"])

    page = client.get(path)
    assert page.status_code == 409
    text = page.content.decode()
    assert "approved by op after this email was sent" in text and 'href="/"' in text
    assert post(client, path, decision="deny", note="no").status_code == 409
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
    assert (
        len(events("approval.decided")) == 1 and DecisionLink.objects.get(pk=_link(path).pk).used_at is None
    )


def test_arguments_edited_after_the_mail_make_the_link_decide_nothing(alice_waits, smtp):
    """op edits the call (a new action replaces it): alice's link says so; a hash that no longer
    matches says the arguments changed. Neither decides."""
    path = mailed_link(smtp, "alice@example.test")
    approval = alice_waits["approval"]
    client = logged_in(alice_waits["alice"])
    Approval.objects.filter(pk=approval.pk).update(arguments_hash="f" * 64)
    changed = client.get(path)
    assert changed.status_code == 409 and "arguments changed" in changed.content.decode()
    assert post(client, path, decision="approve").status_code == 409
    Approval.objects.filter(pk=approval.pk).update(arguments_hash=_link(path).arguments_hash)

    approval_decide(
        tenant_id="t1",
        approval_id=approval.pk,
        user=alice_waits["op"],
        decision="approve",
        arguments={"symbol": "ACME", "side": "buy", "quantity": 5},
        seen=approval.arguments_hash,
    )
    page = client.get(path)
    assert page.status_code == 409 and "edited after this email" in page.content.decode()
    assert post(client, path, decision="approve").status_code == 409
    edited = Approval.objects.get(tenant_id="t1", edit_of=approval.action_id)
    assert edited.status == ApprovalStatus.APPROVED and edited.decided_by == "op"
    assert [body(e)["via"] for e in events("approval.decided")] == []  # the edit's own event
    assert not DecisionLink.objects.filter(used_at__isnull=False).exists()


def test_a_deny_needs_its_reason_and_a_refusal_leaves_the_link_usable(alice_waits, smtp):
    """Deny without a note: refused on the page, the link not spent; with a note, denied."""
    path = mailed_link(smtp, "alice@example.test")
    client = logged_in(alice_waits["alice"])
    refused = post(client, path, decision="deny", note="  ")
    assert refused.status_code == 400 and 'method="post"' in refused.content.decode()
    assert DecisionLink.objects.get(user=alice_waits["alice"]).used_at is None
    assert post(client, path, decision="deny", note="too early").status_code == 200
    approval = Approval.objects.get(pk=alice_waits["approval"].pk)
    assert approval.status == ApprovalStatus.DENIED and approval.note == "too early"


def test_a_high_impact_call_needs_the_typed_confirmation(smtp, operator, brokerage_path):
    """As in the console: approve without typing "approve" is refused and the link kept."""
    member("t1", "alice", Role.APPROVER)
    approval = start_waiting(operator, "big", goal="buy 999999 GAMMA")
    assert approval.high_impact
    send_due()
    path = mailed_link(smtp, "alice@example.test")
    client = logged_in(member("t1", "alice", Role.APPROVER))
    assert "Type <kbd>approve</kbd>" in client.get(path).content.decode()
    refused = post(client, path, decision="approve", confirm="yes")
    assert refused.status_code == 400 and "high impact" in refused.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert post(client, path, decision="approve", confirm="approve").status_code == 200
    (event,) = events("approval.decided")
    assert body(event)["high_impact_confirmed"] is True and body(event)["via"] == "email"


def test_four_eyes_through_links_needs_two_people(smtp, operator, brokerage_path, settings):
    """alice's link records her vote; her link is then spent; bob's link completes the approval."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "four-eyes": "tests.site.console.agents.build_four_eyes",
    }
    alice = member("t1", "alice", Role.APPROVER)
    bob = member("t1", "bob", Role.APPROVER)
    approval = start_waiting(operator, "pair", agent="four-eyes")
    send_due()
    first = post(logged_in(alice), mailed_link(smtp, "alice@example.test"), decision="approve")
    assert first.status_code == 200 and "1 more approver needed" in first.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert logged_in(alice).get(mailed_link(smtp, "alice@example.test")).status_code == 410
    assert post(logged_in(bob), mailed_link(smtp, "bob@example.test"), decision="approve").status_code == 200
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
    assert [body(e)["via"] for e in events("approval.decided")] == ["email", "email"]


def test_no_link_for_people_who_cannot_decide(smtp, operator, brokerage_path):
    """A viewer is not mailed and has no link; an unknown outcome gets none; an approver demoted
    after the mail is refused (403, audited)."""
    vic = member("t1", "vic", Role.VIEWER)
    alice = member("t1", "alice", Role.APPROVER)
    member("t2", "alice", Role.VIEWER)
    reco = member("t2", "reco", Role.RECONCILER)
    start_waiting(operator, "r1")
    waiting_unknown("t2", "u-1")
    send_due()

    assert smtp.to("vic@example.test") == [] and not DecisionLink.objects.filter(user=vic).exists()
    assert not EmailBatch.objects.filter(user=vic).exists()
    assert len(links_in(smtp.to("alice@example.test")[-1])) == 1
    (reco_mail,) = smtp.to("reco@example.test")
    assert links_in(reco_mail) == [] and not DecisionLink.objects.filter(user=reco).exists()

    path = mailed_link(smtp, "alice@example.test")
    member("t1", "alice", Role.VIEWER)
    client = logged_in(alice)
    page = client.get(path)
    assert page.status_code == 403 and "role no longer decides" in page.content.decode()
    assert post(client, path, decision="approve").status_code == 403
    assert Approval.objects.get(run_id="r1").status == ApprovalStatus.PENDING
    assert {body(e)["reason"] for e in events("approval.link_refused")} == {"not_allowed"}

    Membership.objects.filter(user=alice, tenant__slug="t1").delete()  # out of t1 altogether
    gone = client.get(path)
    assert gone.status_code == 403 and "place_order" not in gone.content.decode()


class Kept(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def every_record():
    """Every record of the root, ``django`` and ``keelgate`` loggers (the site's config stops
    the last two from propagating), at DEBUG."""
    kept = Kept()
    loggers = [logging.getLogger(name) for name in ("", "django", "keelgate")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(kept)
        logger.setLevel(logging.DEBUG)
    yield kept.records
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(kept)
        logger.setLevel(level)


def test_tokens_never_reach_a_log_line(alice_waits, smtp, every_record):
    """Every record logged while links are mailed, opened, refused and used, formatted as the site
    formats them (text and JSON), holds no token; nor do the audit chain, the deliveries or the
    access log's and the login redirect's lines."""
    tokens = [mailed_link(smtp, f"{n}@example.test").split("/")[2] for n in ("alice", "bob", "op")]
    alice, bob = logged_in(alice_waits["alice"]), logged_in(alice_waits["bob"])
    path = f"/link/{tokens[0]}/"
    Client().get(path)
    bob.get(path)
    alice.get(path)
    post(alice, path, decision="approve")
    post(alice, path, decision="approve")
    alice.get(f"/link/{tokens[0][:-2]}xx/")
    send_due()

    raw = [r.getMessage() for r in every_record]
    assert any(tokens[0] in m for m in raw)  # Django's "Forbidden: /link/..." lines: the formatters' job
    written = "\n".join(TextFormatter().format(r) + "\n" + JsonFormatter().format(r) for r in every_record)
    access = [redact_url(f"{p}?x=1") for p in (path, f"/login/?next={path}")]
    login = redact_text(f'"GET /login/?next=%2Flink%2F{tokens[0]}%2F HTTP/1.1" 302')
    chain = json.dumps([e.body for e in logged()], default=str)
    batches = json.dumps(list(EmailBatch.objects.values()), default=str)
    for token in tokens:
        for where in (written, *access, login, chain, batches):
            assert token not in where and token[4:20] not in where


def _link(path: str) -> DecisionLink:
    return DecisionLink.objects.get(token_hash=token_hash(path.split("/")[2]))
