"""Slack: approvals posted once and updated in place, decided by a click as the linked person only.

Everything Slack-side is real but local: the official ``slack_sdk`` client calls a fake
of Slack's Web API (``_slack.FakeSlack``), and every request to Keelgate's endpoints is
signed as Slack signs it. The figures (requests, refusals by reason, decisions,
duplicates, lost) are tallied per test and printed at the end of the run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from audit.models import AuditEvent
from audit.wiring import audit_log, integrate_pending
from keelgate.loop import DecisionContext
from notifications.models import (
    DeliveryStatus,
    SlackDelivery,
    SlackInteraction,
    SlackLink,
    SlackWorkspace,
)
from notifications.passes import run_pass
from notifications.slack import SlackChannel
from notifications.slack.blocks import escape
from notifications.slack.interactions import interactions_process
from notifications.slack.links import link_by_admin
from notifications.slack.workspaces import workspace_register
from tenants.models import Membership, Role, Tenant
from tests.site.notifications._scenario import drain, waiting
from tests.site.notifications._slack import (
    CHANNEL,
    SIGNING_SECRET,
    TEAM,
    TOKEN,
    FakeSlack,
    click_body,
    command_body,
    signed,
    submission_body,
)
from tests.site.notifications.contract import ChannelContract, Harness
from tests.site.notifications.mail import smtp

__all__ = ["smtp"]  # the fixture, imported to be used

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]
TOKEN_ENV = "KG_TEST_SLACK_TOKEN"
SECRET_ENV = "KG_TEST_SLACK_SECRET"
INTERACTIONS = "/slack/interactions/"
COMMANDS = "/slack/commands/"


# -- the fake, the settings, the tally --------------------------------------------------


@pytest.fixture
def fake(settings, monkeypatch):
    slack = FakeSlack()
    settings.KEELGATE_SLACK_API_URL = slack.api
    settings.KEELGATE_SLACK_RESPONSE_URL_PREFIX = slack.hooks
    settings.KEELGATE_SLACK_RETRY_SCHEDULE = [0.05, 0.05, 0.05]
    settings.KEELGATE_SLACK_TIMEOUT_SECONDS = 5
    settings.KEELGATE_CONSOLE_URL = "https://console.example.test"
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(SECRET_ENV, SIGNING_SECRET)
    yield slack
    slack.close()


class Tally:
    """What a test sent to the endpoints and what came of it."""

    def __init__(self) -> None:
        self.requests = 0
        self.refusals: Counter[str] = Counter()
        self.acknowledged: list[str] = []
        """``action_ts`` of every click answered 200."""

    def record(self, response) -> None:
        self.requests += 1
        if response.status_code != 200:
            self.refusals[f"http {response.status_code} {response.json()['code']}"] += 1


@pytest.fixture
def tally(record_property):
    counted = Tally()
    yield counted
    rows = list(SlackInteraction.objects.values_list("status", "reason"))
    refused = Counter(reason for status, reason in rows if status == "refused")
    figures = {
        "requests": counted.requests,
        "refusals": dict(counted.refusals + refused),
        "decisions": sum(1 for status, _ in rows if status == "decided"),
        "duplicates": _duplicates(),
        "lost": sum(1 for status, _ in rows if status == "pending"),
    }
    record_property("slack_figures", json.dumps(figures))
    assert figures["duplicates"] == 0 and figures["lost"] == 0


def _duplicates() -> int:
    """Votes cast twice by one person on one approval, plus approvals with more votes than needed."""
    extra = 0
    for votes, required in Approval.objects.values_list("votes", "required"):
        people = [v.get("by") for v in votes or []]
        extra += len(people) - len(set(people)) + max(0, len(people) - required)
    return extra


def post(client: Client, path: str, body: bytes, tally: Tally, **headers):
    response = client.generic("POST", path, body, content_type="application/x-www-form-urlencoded", **headers)
    tally.record(response)
    return response


def slack_pass() -> int:
    return run_pass(SlackChannel())


# -- the people -------------------------------------------------------------------------


@pytest.fixture
def workspace(operator, fake) -> SlackWorkspace:
    """t1's workspace; op (admin) is U0OP, viewer is U0VIEWER, bob (approver) is U0BOB."""
    tenant = Tenant.objects.get(slug="t1")
    ws, _ = workspace_register(
        tenant=tenant, team_id=TEAM, token_env=TOKEN_ENV, secret_env=SECRET_ENV, channel=CHANNEL, actor="test"
    )
    bob = get_user_model().objects.create_user("bob", password="pw-bob-123456")
    Membership.objects.create(user=bob, tenant=tenant, role=Role.APPROVER)
    for slack_user, username in (("U0OP", "op"), ("U0VIEWER", "viewer"), ("U0BOB", "bob")):
        link_by_admin(workspace=ws, slack_user=slack_user, username=username, actor="test")
    return ws


@pytest.fixture
def four_eyes(settings):
    """``four_eyes(run_id)``: a run of t1 whose order waits for two different people."""
    from tests.site.console.conftest import start_waiting

    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "four-eyes": "tests.site.console.agents.build_four_eyes",
    }

    def make(run_id: str) -> Approval:
        return start_waiting(get_user_model().objects.get(username="op"), run_id, agent="four-eyes")

    return make


def click(client, fake, tally, approval: Approval, user: str, **kwargs):
    """Click the Approve button of ``approval``'s message as Slack user ``user``."""
    value = kwargs.pop("value", f"{approval.pk}:{approval.arguments_hash}")
    body = click_body(value, user=user, hooks=fake.hooks, **kwargs)
    response = post(client, INTERACTIONS, body, tally, **signed(body))
    if response.status_code == 200:
        tally.acknowledged.append(user)
    return response


def events(kind: str) -> list[dict]:
    integrate_pending(["t1"], wait=True)  # PostgreSQL's appends are numbered by a reader
    return [
        json.loads(b)
        for b in AuditEvent.objects.filter(tenant_id="t1", kind=kind).values_list("body", flat=True)
    ]


# -- the channel contract ---------------------------------------------------------------


class SlackHarness(Harness):
    """t1's workspace at the fake; each announcement is approvals waiting (row and event)."""

    def __init__(self, fake: FakeSlack) -> None:
        self.channel = SlackChannel()
        self.tenant_id = "t1"
        self.subscriber = ""
        self.fake = fake
        self.made = 0

    def subscribe(self) -> None:
        ws, _ = workspace_register(
            tenant=Tenant.objects.get(slug="t1"),
            team_id=TEAM,
            token_env=TOKEN_ENV,
            secret_env=SECRET_ENV,
            channel=CHANNEL,
            actor="test",
        )
        self.subscriber = f"ws{ws.pk}"

    def announce(self, count: int = 1) -> None:
        from tests.site.notifications.mail import waiting_approvals

        self.made += 1
        waiting_approvals("t1", count, prefix=f"s{self.made}")

    def routed(self, count: int) -> int:
        return count

    def refuse(self, refusing: bool) -> None:
        self.fake.status = 500 if refusing else None

    def received(self) -> int:
        return self.fake.posts()

    def unwanted(self) -> None:
        audit_log().append("t1", actor="test", kind="run.status", body={"run_id": "r", "status": "waiting"})


class TestSlackChannel(ChannelContract):
    """Slack on the shared engine."""

    @pytest.fixture
    def harness(self, operator, fake):
        return SlackHarness(fake)


# -- posting and updating ---------------------------------------------------------------


def test_a_waiting_approval_is_posted_once_and_updated_when_decided_in_the_console(
    workspace, fake, brokerage_path
):
    """One post (tool, run, impact, who may decide, deadline, the Approve button); the console's
    decision updates that very message, naming who and how; nothing is posted twice."""
    approval = waiting(get_user_model().objects.get(username="op"), "r-post")
    assert slack_pass() == 1
    assert slack_pass() == 0
    message = fake.only()
    assert message.channel == CHANNEL
    for words in (
        "place_order",
        "r-post",
        "buy 10 ACME",
        "Who may decide",
        "approvers and admins",
        "Deadline",
    ):
        assert words in message.text
    approve = [b for b in message.buttons() if b["action_id"] == "keelgate_approve"]
    assert [b["value"] for b in approve] == [f"{approval.pk}:{approval.arguments_hash}"]
    op = get_user_model().objects.get(username="op")
    approval_decide(
        tenant_id="t1",
        approval_id=approval.pk,
        user=op,
        decision="approve",
        context=DecisionContext(via="console"),
    )
    assert slack_pass() == 1
    assert fake.posts() == 1 and fake.updates() == 1
    assert "Approved by op in the console" in message.text
    assert message.buttons() == []


def test_untrusted_text_is_escaped_for_mrkdwn(workspace, fake):
    """A tool's impact line cannot mention @channel or smuggle a link: &, < and > are escaped."""
    from tests.site.notifications.mail import waiting_approvals

    (row,) = waiting_approvals("t1", 1, prefix="esc")
    Approval.objects.filter(pk=row.pk).update(impact="<!channel> & <https://evil.example|click me>")
    assert slack_pass() == 1
    text = fake.only().text
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|click me&gt;" in text
    assert escape("a`b<c>&") == "a'b&lt;c&gt;&amp;"


def test_an_unknown_outcome_is_posted_and_updated_when_settled(workspace, fake, brokerage_path):
    """An unknown outcome: posted with a link to settle it in the console, updated when it is."""
    from approvals.models import UnknownOutcome
    from approvals.services import unknown_reconcile
    from runs.agents.brokerage import PaperBrokerage

    op = get_user_model().objects.get(username="op")
    approval = waiting(op, "r-unk")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve")
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    slack_pass()
    unknown = UnknownOutcome.objects.get(tenant_id="t1", run_id="r-unk")
    posted = [m for m in fake.messages if "Outcome unknown" in m.text]
    assert len(posted) == 1 and "Settle in the console" in posted[0].text
    unknown_reconcile(tenant_id="t1", item_id=unknown.pk, user=op, executed=False, note="not in the ledger")
    slack_pass()
    assert "Settled as not executed by op" in posted[0].text


# -- clicks -----------------------------------------------------------------------------


def test_a_click_is_acknowledged_then_decided_as_the_linked_person(workspace, fake, tally, brokerage_path):
    """200 at once and nothing decided in the request; the pass decides it as op, via slack, and
    the message is updated; op is told (only op)."""
    client = Client()
    op = get_user_model().objects.get(username="op")
    approval = waiting(op, "r-click")
    slack_pass()
    assert click(client, fake, tally, approval, "U0OP").status_code == 200
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING  # recorded, not decided, in the request
    done = interactions_process()
    assert (done.decided, done.refused) == (1, 0)
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("approved", "op")
    (decided,) = events("approval.decided")
    assert decided["via"] == "slack" and decided["arguments_hash"] == approval.arguments_hash
    slack_pass()
    assert "Approved by op in Slack" in fake.only().text
    (reply,) = fake.replies
    assert reply["response_type"] == "ephemeral" and reply["replace_original"] is False
    assert "Approved" in reply["text"]


def assert_sent_twice_decided_once(client, body: bytes, tally) -> None:
    """Slack's retry: the same signed request twice, both 200, one row, one decision."""
    headers = signed(body)
    assert post(client, INTERACTIONS, body, tally, **headers).status_code == 200
    assert post(client, INTERACTIONS, body, tally, **headers).status_code == 200
    assert SlackInteraction.objects.count() == 1
    interactions_process()
    assert len(events("approval.decided")) == 1


def test_slacks_retry_of_a_click_is_recorded_and_decided_once(workspace, fake, tally, brokerage_path):
    """The same request sent twice (Slack retries): both 200, one row, one decision."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-retry")
    body = click_body(f"{approval.pk}:{approval.arguments_hash}", user="U0OP", hooks=fake.hooks)
    assert_sent_twice_decided_once(client, body, tally)


def test_a_forged_signature_is_refused(workspace, fake, tally, brokerage_path):
    """Signed with another secret, or not signed: 401, nothing recorded."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-forged")
    body = click_body(f"{approval.pk}:{approval.arguments_hash}", user="U0OP", hooks=fake.hooks)
    forged = post(client, INTERACTIONS, body, tally, **signed(body, secret="not-the-secret"))
    assert forged.status_code == 401 and forged.json()["code"] == "slack_signature_invalid"
    unsigned = post(client, INTERACTIONS, body, tally)
    assert unsigned.status_code == 401
    tampered = body.replace(b"U0OP", b"U0BOB")
    assert post(client, INTERACTIONS, tampered, tally, **signed(body)).status_code == 401
    assert not SlackInteraction.objects.exists()


def test_an_old_timestamp_is_refused_as_a_replay(workspace, fake, tally, brokerage_path):
    """Correctly signed six minutes ago: 401 ``slack_request_too_old``, nothing recorded."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-old")
    body = click_body(f"{approval.pk}:{approval.arguments_hash}", user="U0OP", hooks=fake.hooks)
    old = post(client, INTERACTIONS, body, tally, **signed(body, at=time.time() - 360))
    assert old.status_code == 401 and old.json()["code"] == "slack_request_too_old"
    assert not SlackInteraction.objects.exists()


def test_an_unlinked_clicker_is_refused_privately_and_audited(workspace, fake, tally, brokerage_path):
    """Nobody linked: nothing decided, a message only they see, a ``slack.refused`` event."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-unlinked")
    assert click(client, fake, tally, approval, "U0STRANGER").status_code == 200
    assert interactions_process().refused == 1
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    (refused,) = events("slack.refused")
    assert refused["reason"] == "unlinked" and refused["slack_user"] == "U0STRANGER"
    assert refused["tool"] == "place_order" and refused["run_id"] == "r-unlinked"
    (reply,) = fake.replies
    assert reply["response_type"] == "ephemeral" and "not linked" in reply["text"]


def test_a_viewer_is_refused(workspace, fake, tally, brokerage_path):
    """A linked viewer: the console's role check refuses them (``forbidden``), audited."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-viewer")
    click(client, fake, tally, approval, "U0VIEWER")
    interactions_process()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert [e["reason"] for e in events("slack.refused")] == ["forbidden"]
    assert "role" in fake.replies[0]["text"]


def test_four_eyes_the_same_person_twice_is_refused_and_a_second_person_decides(
    workspace, fake, tally, brokerage_path, four_eyes
):
    """op approves (1 of 2), op again is refused (``duplicate_approver``), bob's approval decides it."""
    client = Client()
    four = four_eyes("r-4e")
    assert four.required == 2
    slack_pass()
    click(client, fake, tally, four, "U0OP")
    interactions_process()
    click(client, fake, tally, four, "U0OP")
    interactions_process()
    four.refresh_from_db()
    assert four.status == ApprovalStatus.PENDING and [v["by"] for v in four.votes] == ["op"]
    assert [e["reason"] for e in events("slack.refused")] == ["approval_duplicate_approver"]
    slack_pass()
    message = next(m for m in fake.messages if "r-4e" in m.text)
    assert "Approved so far" in message.text and "1 of 2" in message.text
    click(client, fake, tally, four, "U0BOB")
    interactions_process()
    four.refresh_from_db()
    assert four.status == ApprovalStatus.APPROVED and [v["by"] for v in four.votes] == ["op", "bob"]
    slack_pass()
    assert "Approved by bob in Slack" in message.text


def test_a_click_after_a_console_decision_is_refused_and_the_message_says_who(
    workspace, fake, tally, brokerage_path
):
    """Decided in the console first: the click is refused (``already_decided``, naming op), the
    message shows the console's decision."""
    client = Client()
    op = get_user_model().objects.get(username="op")
    approval = waiting(op, "r-late")
    slack_pass()
    approval_decide(
        tenant_id="t1",
        approval_id=approval.pk,
        user=op,
        decision="approve",
        context=DecisionContext(via="console"),
    )
    click(client, fake, tally, approval, "U0BOB")
    interactions_process()
    assert [e["reason"] for e in events("slack.refused")] == ["approval_already_decided"]
    assert "already settled by op" in fake.replies[0]["text"]
    slack_pass()
    assert "Approved by op in the console" in fake.only().text
    assert len(events("approval.decided")) == 1


def test_a_stale_hash_is_refused(workspace, fake, tally, brokerage_path):
    """A button naming other arguments than the call's: ``approval_stale``, nothing decided."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-stale")
    click(client, fake, tally, approval, "U0OP", value=f"{approval.pk}:{'0' * 64}")
    interactions_process()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert [e["reason"] for e in events("slack.refused")] == ["approval_stale"]


def test_a_button_naming_another_tenants_approval_is_refused_as_not_found(workspace, fake, tally):
    """t1's workspace cannot reach t2's approvals, whatever id a (signed) button names."""
    from tests.site.notifications.mail import waiting_approvals

    Tenant.objects.create(slug="t2")
    Membership.objects.create(
        user=get_user_model().objects.get(username="op"),
        tenant_id=Tenant.objects.get(slug="t2").pk,
        role=Role.ADMIN,
    )
    (other,) = waiting_approvals("t2", 1, prefix="other")
    click(Client(), fake, tally, other, "U0OP", value=f"{other.pk}:{'ab' * 32}")
    interactions_process()
    other.refresh_from_db()
    assert other.status == ApprovalStatus.PENDING
    assert [e["reason"] for e in events("slack.refused")] == ["not_found"]


def test_a_high_impact_call_opens_the_console_and_a_click_cannot_approve_it(
    workspace, fake, tally, brokerage_path
):
    """No Approve button (Deny stays), a link to the console; a signed approve click naming it anyway
    is refused."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-big", goal="buy 150 ACME")
    assert approval.high_impact
    slack_pass()
    buttons = fake.only().buttons()
    assert [b["action_id"] for b in buttons] == ["keelgate_confirm", "keelgate_deny", "keelgate_open"]
    assert buttons[2]["url"].startswith("https://console.example.test/")
    click(client, fake, tally, approval, "U0OP")
    interactions_process()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert [e["reason"] for e in events("slack.refused")] == ["high_impact_confirmation_required"]
    assert "both ask for the typed confirmation" in fake.replies[0]["text"]


# -- Deny: a form asks why; its submission denies ---------------------------------------


def fill(client, fake, tally, approval: Approval, user: str, typed: str | None, *, action_id: str, **kwargs):
    """Click the button ``action_id`` as ``user``, then send the form Slack opened back with ``typed``
    in it; the form's answer."""
    opened = len(fake.views)
    response = click(client, fake, tally, approval, user, action_id=action_id, **kwargs)
    assert response.status_code == 200 and len(fake.views) == opened + 1
    body = submission_body(fake.views[-1]["view"], user=user, typed=typed)
    return post(client, INTERACTIONS, body, tally, **signed(body))


def deny(client, fake, tally, approval: Approval, user: str, reason: str | None, **kwargs):
    """Click Deny… and send its form back with ``reason``."""
    return fill(client, fake, tally, approval, user, reason, action_id="keelgate_deny", **kwargs)


def test_deny_opens_a_form_and_its_reason_denies_as_the_linked_person(workspace, fake, tally, brokerage_path):
    """The click opens a form (views.open with its trigger_id) and decides nothing; the submission
    is acknowledged with an empty 200 (the form closes), then denied as bob with the reason, via
    slack; the message says so and bob alone is told."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-deny")
    slack_pass()
    (deny_button,) = [b for b in fake.only().buttons() if b["action_id"] == "keelgate_deny"]
    assert deny_button["value"] == f"{approval.pk}:{approval.arguments_hash}"
    click(client, fake, tally, approval, "U0BOB", action_id="keelgate_deny")
    (form,) = fake.views
    assert form["trigger_id"].endswith(".trigger")
    assert form["view"]["callback_id"] == "keelgate_deny_reason"
    assert "place_order" in json.dumps(form["view"]) and "r-deny" in json.dumps(form["view"])
    assert not SlackInteraction.objects.exists()  # opening the form decides nothing
    body = submission_body(form["view"], user="U0BOB", typed="  not ann's account today  ")
    answer = post(client, INTERACTIONS, body, tally, **signed(body))
    assert (answer.status_code, answer.content) == (200, b"")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING  # recorded, not decided, in the request
    assert (interactions_process().decided, Approval.objects.get(pk=approval.pk).status) == (1, "denied")
    approval.refresh_from_db()
    assert (approval.decided_by, approval.note) == ("bob", "not ann's account today")
    (decided,) = events("approval.decided")
    assert decided["via"] == "slack" and decided["decision"] == "deny"
    slack_pass()
    assert "Denied by bob in Slack" in fake.only().text and "not ann's account today" in fake.only().text
    assert fake.only().buttons() == []
    (reply,) = fake.replies
    assert reply["response_type"] == "ephemeral" and "Denied" in reply["text"]
    assert reply["path"].startswith("/hooks/actions/")  # the Deny click's own response_url


def test_a_form_sent_again_is_recorded_once_and_an_empty_reason_keeps_it_open(
    workspace, fake, tally, brokerage_path
):
    """No reason: Slack is told to show an error under the field, nothing recorded; the same form
    submitted twice (Slack's retry) is one click, one denial."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-deny-twice")
    empty = deny(client, fake, tally, approval, "U0OP", "   ")
    assert empty.status_code == 200
    assert empty.json() == {"response_action": "errors", "errors": {"reason": "Say why the call is denied."}}
    assert not SlackInteraction.objects.exists()
    body = submission_body(fake.views[-1]["view"], user="U0OP", typed="no")
    assert_sent_twice_decided_once(client, body, tally)


def test_a_viewer_an_unlinked_person_and_a_stale_form_deny_nothing(workspace, fake, tally, brokerage_path):
    """The form's submission is judged as a click is: a viewer (``forbidden``), a stranger
    (``unlinked``) and a form naming other arguments (``approval_stale``) are refused, audited."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-deny-no")
    deny(client, fake, tally, approval, "U0VIEWER", "I only watch")
    deny(client, fake, tally, approval, "U0STRANGER", "who am I")
    deny(client, fake, tally, approval, "U0OP", "stale", value=f"{approval.pk}:{'0' * 64}")
    assert interactions_process().refused == 3
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    refused = events("slack.refused")
    assert [(e["reason"], e["action"]) for e in refused] == [
        ("forbidden", "deny"),
        ("unlinked", "deny"),
        ("approval_stale", "deny"),
    ]
    assert all("Nothing was decided" in r["text"] for r in fake.replies) and len(fake.replies) == 3


def test_a_high_impact_call_can_be_denied_in_slack(workspace, fake, tally, brokerage_path):
    """Approving it needs the console's typed confirmation; refusing it needs none."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-big-deny", goal="buy 150 ACME")
    slack_pass()
    assert [b["action_id"] for b in fake.only().buttons()] == [
        "keelgate_confirm",
        "keelgate_deny",
        "keelgate_open",
    ]
    deny(client, fake, tally, approval, "U0OP", "far too big")
    interactions_process()
    approval.refresh_from_db()
    assert (approval.status, approval.note) == (ApprovalStatus.DENIED, "far too big")


def test_a_high_impact_call_is_approved_in_slack_only_with_approve_typed(
    workspace, fake, tally, brokerage_path
):
    """Approve… opens a form asking for the console's typed confirmation; anything but "approve"
    keeps it open with an error and records nothing; "Approve" (any case) is recorded as
    confirmed and the pass approves it as op; the order runs once."""
    from runs.agents.brokerage import PaperBrokerage

    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-big-yes", goal="buy 150 ACME")
    slack_pass()
    wrong = fill(client, fake, tally, approval, "U0OP", "yes", action_id="keelgate_confirm")
    (form,) = fake.views
    assert form["view"]["callback_id"] == "keelgate_confirm_high_impact"
    assert "high impact" in json.dumps(form["view"]) and "buy 150 ACME" in json.dumps(form["view"])
    assert wrong.json() == {
        "response_action": "errors",
        "errors": {"confirm": "Type approve to approve this high-impact call."},
    }
    assert not SlackInteraction.objects.exists()
    body = submission_body(form["view"], user="U0OP", typed=" Approve ")
    assert post(client, INTERACTIONS, body, tally, **signed(body)).status_code == 200
    row = SlackInteraction.objects.get()
    assert (row.action, row.confirmed) == ("approve", True)
    assert interactions_process().decided == 1
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == (ApprovalStatus.APPROVED, "op")
    (decided,) = events("approval.decided")
    assert decided["via"] == "slack"
    drain()
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]
    slack_pass()
    assert "Approved by op in Slack" in fake.only().text


def test_a_deny_on_an_m_of_n_call_ends_it_whatever_the_votes(
    workspace, fake, tally, brokerage_path, four_eyes
):
    """op approved one of two; bob's denial from Slack ends it: nothing runs."""
    client = Client()
    four = four_eyes("r-4e-deny")
    click(client, fake, tally, four, "U0OP")
    deny(client, fake, tally, four, "U0BOB", "one of us says no")
    assert interactions_process().decided == 2
    four.refresh_from_db()
    assert (four.status, [v["by"] for v in four.votes], four.decided_by) == ("denied", ["op"], "bob")


def test_a_forms_words_fit_slacks_section_whatever_the_call_says(workspace, fake, tally, brokerage_path):
    """An impact and a run id full of characters that escaping lengthens (``&`` is ``&amp;``) are
    cut to fit Slack's 3,000 characters of a section; the form's own words are kept whole."""
    from notifications.slack.modals import CONFIRM_TYPED, form_view

    row = Approval(tool="place_order", run_id="r-" + "&" * 120, impact="&" * 500, high_impact=True)
    view = form_view(CONFIRM_TYPED, row, value="1:" + "0" * 64, reply_to="")
    text = view["blocks"][0]["text"]["text"]
    assert len(text) <= 2900 and text.endswith(CONFIRM_TYPED.words)


def test_a_form_slack_would_not_open_tells_the_clicker_to_use_the_console(
    workspace, fake, tally, brokerage_path
):
    """Slack down when Deny is clicked: still a 200, nothing recorded, and the clicker is sent the
    console's link (the reply goes to Slack's hooks, which answer)."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-deny-down")
    fake.status = 500
    response = click(client, fake, tally, approval, "U0OP", action_id="keelgate_deny")
    assert response.status_code == 200 and fake.views == []
    assert not SlackInteraction.objects.exists()
    (reply,) = fake.replies
    assert "could not be opened" in reply["text"]
    assert f"https://console.example.test/#item-a-{approval.pk}" in reply["text"]


@pytest.mark.parametrize(
    ("view", "code"),
    [
        ({"callback_id": "someone_elses_form", "id": "V1"}, "unknown_interaction"),
        (
            {"callback_id": "keelgate_deny_reason", "id": "V1", "private_metadata": "{not json"},
            "payload_invalid",
        ),
        ({"callback_id": "keelgate_deny_reason", "id": "V1", "private_metadata": "[]"}, "payload_invalid"),
        (
            {"callback_id": "keelgate_deny_reason", "id": "V1", "private_metadata": '{"value": "1:2"}'},
            "payload_invalid",
        ),
        ({"callback_id": "keelgate_deny_reason", "private_metadata": '{"value": "x"}'}, "payload_invalid"),
        (
            {"callback_id": "keelgate_deny_reason", "id": "V1", "private_metadata": "[" * 2_900},
            "payload_invalid",
        ),
        (
            {"callback_id": "keelgate_deny_reason", "id": "V1", "private_metadata": " " * 3_001},
            "payload_invalid",
        ),
    ],
)
def test_a_malformed_form_is_a_clear_400(workspace, fake, tally, view, code):
    """A form that is not Keelgate's, or carries no call: 400 with a code, nothing recorded."""
    body = submission_body(view, user="U0OP", typed="why")
    response = post(Client(raise_request_exception=False), INTERACTIONS, body, tally, **signed(body))
    assert response.status_code == 400 and response.json()["code"] == code
    assert not SlackInteraction.objects.exists()


def test_clicks_told_of_are_pruned_after_the_channels_keep(workspace, fake, tally, brokerage_path):
    """A click's row only makes Slack's repeat of it the same click: once told of and older than
    the channel keeps finished deliveries (30 days), it goes; its decision stays in the audit log."""
    from datetime import timedelta

    from django.utils import timezone

    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-prune")
    click(client, fake, tally, approval, "U0OP")
    slack_pass()
    (row,) = SlackInteraction.objects.all()
    assert row.replied and row.status == "decided"
    SlackInteraction.objects.filter(pk=row.pk).update(processed_at=timezone.now() - timedelta(days=29))
    slack_pass()
    assert SlackInteraction.objects.count() == 1
    SlackInteraction.objects.filter(pk=row.pk).update(processed_at=timezone.now() - timedelta(days=31))
    slack_pass()
    assert not SlackInteraction.objects.exists()
    assert len(events("approval.decided")) == 1


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not a form at all \xff", "payload_invalid"),
        (b"payload=", "payload_invalid"),
        (b"payload=%7Bnot%20json", "payload_invalid"),
        (b"payload=%5B1%2C2%5D", "payload_invalid"),
        (b"other=1", "payload_invalid"),
        (b"payload=%7B%22type%22%3A%22block_actions%22%7D", "payload_invalid"),
        (b"payload=" + b"[" * 50_000, "payload_invalid"),  # nested past the parser's depth
    ],
)
def test_malformed_payloads_are_clear_400s(workspace, fake, tally, body, code):
    """Whatever the body, signed or not, a 400 with a code, never a 500; nothing recorded."""
    client = Client(raise_request_exception=False)
    for headers in (signed(body), {}):
        response = post(client, INTERACTIONS, body, tally, **headers)
        assert response.status_code == 400 and response.json()["code"] == code
    assert not SlackInteraction.objects.exists()


def test_unknown_actions_and_interactions_are_clear_400s(workspace, fake, tally, brokerage_path):
    """A signed click of an action Keelgate does not know, another interaction type, a bad value: 400."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-unknown")
    value = f"{approval.pk}:{approval.arguments_hash}"
    unknown = click(client, fake, tally, approval, "U0OP", action_id="keelgate_delete_everything")
    assert unknown.status_code == 400 and unknown.json()["code"] == "unknown_action"
    bad = click(client, fake, tally, approval, "U0OP", value="12:not-a-hash")
    assert bad.status_code == 400 and bad.json()["code"] == "payload_invalid"
    body = click_body(value, user="U0OP", hooks=fake.hooks).replace(b"block_actions", b"view_submission")
    other = post(client, INTERACTIONS, body, tally, **signed(body))
    assert other.status_code == 400 and other.json()["code"] == "unknown_interaction"
    link = click(client, fake, tally, approval, "U0OP", action_id="keelgate_open")
    assert link.status_code == 200  # a URL button's click: acknowledged, nothing to decide
    assert Client().get(INTERACTIONS).status_code == 405
    assert not SlackInteraction.objects.exists()


# -- one call, decided from several places ----------------------------------------------


def test_four_eyes_counts_a_person_once_across_an_emailed_link_and_slack(
    workspace, fake, tally, brokerage_path, four_eyes, smtp
):
    """bob approves from his emailed link; his Slack click is then refused as the same person;
    op's click in Slack is the second pair of eyes; the message names both; the order runs once."""
    from notifications.emails import send_due
    from runs.agents.brokerage import PaperBrokerage
    from tests.site.notifications.mail import member
    from tests.site.notifications.test_email_links import logged_in, mailed_link
    from tests.site.notifications.test_email_links import post as form_post

    bob = member("t1", "bob", Role.APPROVER)
    approval = four_eyes("r-two-ways")
    send_due()
    slack_pass()
    by_mail = form_post(logged_in(bob), mailed_link(smtp, "bob@example.test"), decision="approve")
    assert by_mail.status_code == 200 and "1 more approver needed" in by_mail.content.decode()
    client = Client()
    click(client, fake, tally, approval, "U0BOB")
    interactions_process()
    assert [e["reason"] for e in events("slack.refused")] == ["approval_duplicate_approver"]
    click(client, fake, tally, approval, "U0OP")
    interactions_process()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED and [v["by"] for v in approval.votes] == ["bob", "op"]
    assert [e["via"] for e in events("approval.decided")] == ["email", "slack"]
    slack_pass()
    message = fake.only()
    assert "Approved by op in Slack" in message.text and "*Approved by:* bob, op" in message.text
    drain()
    assert [(o.executions, o.replays) for o in PaperBrokerage().ledger()] == [(1, 0)]


def test_a_posted_call_a_standing_approval_settles_is_updated_naming_it(workspace, fake, brokerage_path):
    """Posted while it waited; a standing approval made since settles it: the message says so."""
    from datetime import timedelta

    from django.utils import timezone

    from approvals.standing import standing_apply, standing_create

    bob = get_user_model().objects.get(username="bob")
    approval = waiting(get_user_model().objects.get(username="op"), "r-standing")
    slack_pass()
    standing_create(
        tenant_id="t1",
        user=bob,
        agent="paper-trader",
        tool="place_order",
        bounds={"quantity": {"max": 10}},
        expires_at=timezone.now() + timedelta(days=1),
    )
    assert standing_apply(tenant_id="t1", approval_id=approval.pk) is not None
    slack_pass()
    assert "Approved by bob through a standing approval" in fake.only().text
    assert fake.only().buttons() == []


# -- Slack's failures -------------------------------------------------------------------


def test_a_revoked_token_is_a_clear_failed_delivery(workspace, fake, brokerage_path):
    """``token_revoked``: failed at once, saying so; no retry hammers Slack."""
    waiting(get_user_model().objects.get(username="op"), "r-revoked")
    fake.revoked = True
    assert slack_pass() == 0
    (delivery,) = SlackDelivery.objects.all()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert "token_revoked" in delivery.last_error and "bot token" in delivery.last_error


def test_a_slack_outage_blocks_no_decision_and_the_update_arrives_after(workspace, fake, brokerage_path):
    """Slack down: the console decides at once; the update waits its backoff, then is sent."""
    op = get_user_model().objects.get(username="op")
    approval = waiting(op, "r-outage")
    slack_pass()
    fake.status = 503
    decided = approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision="approve")
    assert decided.status == ApprovalStatus.APPROVED
    assert slack_pass() == 0
    update = SlackDelivery.objects.get(update=True)
    assert update.status == DeliveryStatus.PENDING and "unavailable" in update.last_error
    fake.status = None
    time.sleep(0.1)
    assert slack_pass() == 1
    assert "Approved by op" in fake.only().text


def test_the_token_and_secret_are_never_logged(workspace, fake, tally, brokerage_path, caplog):
    """Posts, updates, failures and clicks at DEBUG, slack_sdk's logger included: no secret appears."""
    caplog.set_level(logging.DEBUG)
    client = Client()
    op = get_user_model().objects.get(username="op")
    approval = waiting(op, "r-logs")
    slack_pass()
    click(client, fake, tally, approval, "U0OP")
    click(client, fake, tally, approval, "U0NOBODY")
    body = click_body("1:" + "0" * 64, user="U0OP", hooks=fake.hooks)
    post(client, INTERACTIONS, body, tally, **signed(body, secret="wrong"))
    interactions_process()
    fake.revoked = True
    waiting(op, "r-logs-2")
    slack_pass()
    assert next(auth for _, auth in fake.calls) == f"Bearer {TOKEN}"  # it was sent, to Slack only
    integrate_pending(["t1"], wait=True)
    stored = " ".join(f"{d.last_error} {d.receipt}" for d in SlackDelivery.objects.all()) + " ".join(
        json.dumps(b) for b in AuditEvent.objects.values_list("body", flat=True)
    )
    for secret in (TOKEN, SIGNING_SECRET):
        assert secret not in caplog.text
        assert secret not in stored


# -- linking ----------------------------------------------------------------------------


def test_a_person_links_themself_with_a_one_time_code(workspace, fake, tally):
    """Console page → code; ``/keelgate link CODE`` signed → linked and audited; the code works once."""
    console = Client()
    console.force_login(get_user_model().objects.get(username="viewer"))
    assert console.get("/slack/link/").status_code == 200
    page = console.post("/slack/link/", {"tenant": "t1"})
    code = page.content.decode().split('id="slack-link-code">')[1].split("<")[0]
    body = command_body(f"link {code}", user="U0NEWVIEWER")
    answer = post(Client(), COMMANDS, body, tally, **signed(body))
    assert answer.status_code == 200 and answer.json()["response_type"] == "ephemeral"
    assert "you now act as viewer" in answer.json()["text"]
    assert SlackLink.objects.get(workspace=workspace, user__username="viewer").slack_user == "U0NEWVIEWER"
    assert [e["how"] for e in events("slack.linked") if e["username"] == "viewer"] == ["admin", "code"]
    again = command_body(f"link {code}", user="U0OTHER")
    assert "Not linked" in post(Client(), COMMANDS, again, tally, **signed(again)).json()["text"]
    forged = command_body(f"link {code}", user="U0MALLORY")
    assert post(Client(), COMMANDS, forged, tally, **signed(forged, secret="guess")).status_code == 401
    unknown = command_body("delete", user="U0OP")
    assert post(Client(), COMMANDS, unknown, tally, **signed(unknown)).status_code == 400


def test_the_command_registers_links_and_unlinks(operator, fake, capsys):
    """``keelgate_slack workspace``, ``link``, ``unlink``: each audited; ids are checked."""
    call_command(
        "keelgate_slack",
        "workspace",
        "--tenant",
        "t1",
        "--team",
        TEAM,
        "--token-env",
        TOKEN_ENV,
        "--secret-env",
        SECRET_ENV,
        "--channel",
        CHANNEL,
        "--agent-channel",
        "paper-trader=C0TRADES",
    )
    ws = SlackWorkspace.objects.get(team_id=TEAM)
    assert ws.channel_for("paper-trader") == "C0TRADES" and ws.channel_for("other") == CHANNEL
    call_command("keelgate_slack", "link", "--team", TEAM, "--slack-user", "U0OP", "--username", "op")
    call_command("keelgate_slack", "unlink", "--team", TEAM, "--slack-user", "U0OP")
    integrate_pending(["t1"], wait=True)
    kinds = list(AuditEvent.objects.filter(kind__startswith="slack.").values_list("kind", flat=True))
    assert kinds == ["slack.workspace_registered", "slack.linked", "slack.unlinked"]
    registered = events("slack.workspace_registered")[0]
    assert registered["token_env"] == TOKEN_ENV and TOKEN not in json.dumps(registered)
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("keelgate_slack", "link", "--team", TEAM, "--slack-user", "U0X", "--username", "nobody")
    with pytest.raises(CommandError):
        call_command(
            "keelgate_slack",
            "workspace",
            "--tenant",
            "t1",
            "--team",
            "nope",
            "--token-env",
            "X",
            "--secret-env",
            "Y",
            "--channel",
            CHANNEL,
        )


def test_the_admin_registers_a_workspace_through_the_audited_service(operator, fake):
    """Django's admin: the add form saves through ``workspace_register`` (audited under the admin's
    name); the pages list the variables' names, never a token."""
    admin = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    client = Client()
    client.force_login(admin)
    form = {
        "tenant": Tenant.objects.get(slug="t1").pk,
        "team_id": TEAM,
        "token_env": TOKEN_ENV,
        "secret_env": SECRET_ENV,
        "channel": CHANNEL,
        "agent_channels": "{}",
    }
    refused = client.post("/admin/notifications/slackworkspace/add/", {**form, "team_id": "not-a-team"})
    assert refused.status_code == 200 and "is not a Slack team id" in refused.content.decode()
    assert not SlackWorkspace.objects.exists()
    added = client.post("/admin/notifications/slackworkspace/add/", form)
    assert added.status_code == 302, added.content.decode()[-2000:]
    assert SlackWorkspace.objects.get(team_id=TEAM).token_env == TOKEN_ENV
    (event,) = events("slack.workspace_registered")
    assert event["created"] is True
    integrate_pending(["t1"], wait=True)
    actor = AuditEvent.objects.get(kind="slack.workspace_registered").actor
    assert actor == "root"
    listing = client.get("/admin/notifications/slackworkspace/")
    assert listing.status_code == 200 and TOKEN_ENV in listing.content.decode()
    assert TOKEN not in listing.content.decode()
    for page in ("slacklink", "slackdelivery", "slackinteraction"):
        assert client.get(f"/admin/notifications/{page}/").status_code == 200


# -- a process killed between Slack's acknowledgement and the decision's commit ---------

KILLER = """
import os, signal, sys
import django
django.setup()
import notifications.slack.interactions as interactions
real = interactions.approval_decide

def decide_then_die(**kwargs):
    real(**kwargs)  # the decision is written, its transaction not yet committed
    sys.stdout.write("deciding, then SIGKILL\\n"); sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)

interactions.approval_decide = decide_then_die
interactions.interactions_process()
"""


def test_a_sigkill_between_acknowledgement_and_commit_loses_nothing_and_decides_once(
    workspace, fake, tally, child_env, brokerage_path
):
    """The click is acknowledged; a real process deciding it is SIGKILLed before the commit: nothing
    decided, the click still pending; ``keelgate_notify --once`` decides it, once."""
    client = Client()
    approval = waiting(get_user_model().objects.get(username="op"), "r-kill")
    assert click(client, fake, tally, approval, "U0OP").status_code == 200
    env = {
        **child_env,
        TOKEN_ENV: TOKEN,
        SECRET_ENV: SIGNING_SECRET,
        "KEELGATE_SLACK_API_URL": fake.api,
        "KEELGATE_SLACK_RESPONSE_URL_PREFIX": fake.hooks,
        "KEELGATE_EMAIL_ENABLED": "0",
    }
    killed = subprocess.run(
        [sys.executable, "-c", KILLER], cwd=ROOT, env=env, capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert b"then SIGKILL" in killed.stdout
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert SlackInteraction.objects.get().status == "pending"
    assert events("approval.decided") == []
    restarted = subprocess.run(
        [sys.executable, "manage.py", "keelgate_notify", "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert restarted.returncode == 0, restarted.stderr.decode()[-2000:]
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("approved", "op")
    assert len(events("approval.decided")) == 1
    assert SlackInteraction.objects.get().status == "decided"
    for output in (killed.stdout, killed.stderr, restarted.stdout, restarted.stderr):
        assert TOKEN.encode() not in output and SIGNING_SECRET.encode() not in output
    assert os.environ.get(TOKEN_ENV) == TOKEN  # the fixture's, for the child processes only
