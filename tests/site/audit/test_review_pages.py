"""The review pages: the Decisions view, one event's page, the checkpoints, a run's trail,
Export for admins; every kind of event renders on each, its untrusted text escaped."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from audit.kinds import EVENT_KINDS
from audit.models import AuditEvent, Checkpoint
from audit.presentation import event_words
from audit.selectors import DECISION_KINDS
from audit.wiring import audit_log
from runs.services import run_start
from tenants.models import Membership, Role, Tenant

from .every_kind import BODIES, HOSTILE, RUN, append_every_kind
from .review_log import LOG, Spec, append_log, hold_sequencing, write_log

pytestmark = pytest.mark.django_db


def client_of(operator, username: str) -> Client:
    client = Client()
    client.force_login(operator.__class__.objects.get(username=username))
    return client


def rows(page: str) -> dict[int, str]:
    """Each table row of the page by its event number."""
    return {int(seq): row for seq, row in re.findall(r'<tr id="ev-(\d+)"(.*?)</tr>', page, re.S)}


def cell(row: str, label: str) -> str:
    found = re.search(rf'<td data-label="{label}"[^>]*>(.*?)</td>', row, re.S)
    assert found, (label, row)
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


# -- the Decisions view ----------------------------------------------------------------------


def test_the_decision_kinds_are_the_issues_list_and_all_known():
    """approve, deny, edit, reconcile, escalate, expire, cancel (and its request): each a listed kind."""
    assert set(DECISION_KINDS) == {
        "approval.decided",
        "approval.edited",
        "loop.reconciled",
        "approval.escalated",
        "approval.expired",
        "run.cancelled",
        "run.cancel_requested",
    }
    assert set(DECISION_KINDS) <= set(EVENT_KINDS)


def test_the_decisions_view_lists_every_decision_newest_first_with_who_what_and_the_note(operator):
    """One event of every kind: only decisions show, newest first, with outcome, tool, run link and note."""
    append_every_kind("t1")
    log = audit_log()
    denied = log.append(
        "t1",
        actor="rita",
        kind="approval.decided",
        body={"run_id": "r-9", "tool": "transfer", "decision": "deny", "note": "too big"},
    )
    page = client_of(operator, "viewer").get("/audit/t1/decisions/")
    assert page.status_code == 200
    shown = rows(page.content.decode())
    kinds = [re.search(r'data-kind="([^"]+)"', row).group(1) for row in shown.values()]
    assert sorted(kinds) == sorted([*DECISION_KINDS, "approval.decided"])
    assert list(shown) == sorted(shown, reverse=True)
    by_kind = {re.search(r'data-kind="([^"]+)"', r).group(1): r for s, r in shown.items() if s != denied.seq}
    outcomes = {
        "approval.decided": "approved (1 of 2)",
        "approval.edited": "edited: quantity",
        "loop.reconciled": "reconciled: not executed",
        "approval.escalated": "escalated to admins",
        "approval.expired": "expired: denied",
        "run.cancel_requested": "cancel requested",
        "run.cancelled": "cancelled, 1 approval withdrawn",
    }
    for kind, outcome in outcomes.items():
        row = by_kind[kind]
        assert cell(row, "Decision") == f"{outcome} {kind}", kind
        assert cell(row, "Who") == "tester"
        assert f'href="/runs/t1/{RUN}/"' in row, kind
        assert cell(row, "Note") == (BODIES[kind].get("note") or "—"), kind
        assert cell(row, "Tool") == BODIES[kind].get("tool", "—"), kind
        seq = next(s for s, r in shown.items() if r == row)
        assert f'href="/audit/t1/events/{seq}/"' in row
    assert cell(shown[denied.seq], "Decision") == "denied approval.decided"
    assert cell(shown[denied.seq], "Who") == "rita" and cell(shown[denied.seq], "Note") == "too big"
    body = page.content.decode()
    assert HOSTILE not in body and html.escape(HOSTILE) in body  # the cancel request's note


def test_the_decisions_view_takes_the_same_filters_and_any_body(operator):
    """Empty bodies of every kind still render; actor and time filters narrow the decisions."""
    append_every_kind("t1", empty_too=True)
    audit_log().append("t1", actor="bob", kind="approval.expired", body={"run_id": ["not", "text"]})
    client = client_of(operator, "viewer")
    page = client.get("/audit/t1/decisions/")
    assert page.status_code == 200
    assert len(rows(page.content.decode())) == 2 * len(DECISION_KINDS) + 1
    by_bob = rows(client.get("/audit/t1/decisions/?actor=bob").content.decode())
    assert len(by_bob) == 1 and cell(next(iter(by_bob.values())), "Run") == "—"
    assert rows(client.get("/audit/t1/decisions/?to=2000-01-01").content.decode()) == {}
    assert (
        "No decisions match these filters."
        in client.get("/audit/t1/decisions/?to=2000-01-01").content.decode()
    )


# -- one event's page ------------------------------------------------------------------------


def test_every_kind_has_a_page_that_shows_it_escaped(operator):
    """Each kind's page: 200, its kind, meaning and words, its body as text; markup never as markup."""
    kinds = append_every_kind("t1", empty_too=True)
    audit_log().append("t1", actor="<i>x</i>", kind="future.kind", body={"run_id": {"odd": 1}, "v": HOSTILE})
    client = client_of(operator, "viewer")
    for seq in range(1, 2 * len(kinds) + 2):
        response = client.get(f"/audit/t1/events/{seq}/")
        assert response.status_code == 200, seq
        page = response.content.decode()
        assert "<script>window.__xss" not in page and "<i>x</i>" not in page
        kind = (kinds + kinds + ["future.kind"])[seq - 1]
        assert f'data-kind="{kind}"' in page
        if kind in EVENT_KINDS:
            assert EVENT_KINDS[kind].meaning in html.unescape(page)
            said = event_words(kind, BODIES[kind] if seq <= len(kinds) else {})
            assert said == "" or said in html.unescape(page), kind
        assert 'id="proof"' in page
    gateway = client.get(f"/audit/t1/events/{kinds.index('gateway.call') + 1}/").content.decode()
    assert html.escape(HOSTILE) in gateway and f'href="/audit/t1/?run={RUN}"' in gateway


def test_an_event_page_is_404_when_unsequenced_missing_or_anothers(operator, monkeypatch):
    """Numbers past the head, not yet given, or of another tenant: 404, as a guessed URL should be."""
    hold_sequencing(monkeypatch)
    write_log("t1", LOG[:3], unsequenced=2)
    Tenant.objects.create(slug="t2", name="T2")
    write_log("t2", LOG[:5])
    client = client_of(operator, "viewer")
    assert client.get("/audit/t1/events/3/").status_code == 200
    assert client.get("/audit/t1/events/4/").status_code == 404
    assert client.get("/audit/t1/events/0/").status_code == 404
    assert client.get("/audit/t2/events/1/").status_code == 404


def checkpoint(tenant_id: str, size: int, *, signer: str = "keelgate.test/t1+0a1b2c3d") -> Checkpoint:
    root = f"{size:064x}"
    note = f"keelgate.test/{tenant_id}\n{size}\nroot-base64\n\n\u2014 {signer} c2lnbmF0dXJl\n"
    return Checkpoint.objects.create(
        tenant_id=tenant_id,
        size=size,
        root=root,
        note=note,
        signed_at=datetime(2026, 12, 1, tzinfo=UTC) + timedelta(minutes=size),
    )


def test_the_proof_block_checks_the_events_inclusion_against_the_latest_checkpoint(operator):
    """No checkpoint; one that covers the event (checked: number, size, signer); one that
    does not yet; an event edited since (the proof fails, said); a note forged (refused)."""
    from audit.checkpoints import log_origin, sign_checkpoint

    log = audit_log()
    client = client_of(operator, "viewer")

    def proof(seq: int) -> str:
        page = client.get(f"/audit/t1/events/{seq}/").content.decode()
        return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.split('id="proof"')[1])).split())

    for n in range(10):
        log.record("t1", actor="op", kind="note", body={"n": n})
    assert "No checkpoint of this tenant's log has been signed yet." in proof(5)
    assert sign_checkpoint("t1") is not None
    for n in range(10, 12):
        log.record("t1", actor="op", kind="note", body={"n": n})
    assert f"Checked: in checkpoint 1 of size 10, signed by {log_origin('t1')}" in proof(5)
    assert "Not yet in a signed checkpoint: the latest, of size 10" in proof(11)
    AuditEvent.objects.filter(tenant_id="t1", seq=5).update(actor="mallory")
    assert "The proof does not check against checkpoint 1 of size 10" in proof(5)
    Checkpoint.objects.filter(tenant_id="t1").update(note=checkpoint_note("t1", 10))
    assert "the checkpoint does not verify" in proof(6)


def checkpoint_note(tenant_id: str, size: int) -> str:
    """A note someone without the site's key made: it names the log but no key signed it."""
    return (
        f"keelgate.test/{tenant_id}\n{size}\nroot-base64\n\n\u2014 keelgate.test/t1+0a1b2c3d c2lnbmF0dXJl\n"
    )


# -- the checkpoints -------------------------------------------------------------------------


def test_the_checkpoints_list_pages_newest_first_through_every_one(operator):
    """60 checkpoints: 50 then 10, largest first, with their signers; t2's never; a bad cursor is 400."""
    client = client_of(operator, "viewer")
    assert "No checkpoints have been signed yet." in client.get("/audit/t1/checkpoints/").content.decode()
    for size in range(1, 61):
        checkpoint("t1", size * 10)
    Tenant.objects.create(slug="t2", name="T2")
    checkpoint("t2", 999)
    first = client.get("/audit/t1/checkpoints/").content.decode()
    sizes = [int(s) for s in re.findall(r'<tr id="cp-(\d+)"', first)]
    assert sizes == list(range(600, 100, -10))
    assert "keelgate.test/t1+0a1b2c3d" in first and "cp-999" not in first
    older = re.search(r'href="\?before=(\d+)" rel="next"', first).group(1)
    assert older == "110"
    second = client.get(f"/audit/t1/checkpoints/?before={older}").content.decode()
    assert [int(s) for s in re.findall(r'<tr id="cp-(\d+)"', second)] == list(range(100, 0, -10))
    assert 'rel="next"' not in second
    assert client.get("/audit/t1/checkpoints/?before=garbage").status_code == 400
    assert client.get("/audit/t1/checkpoints/?before=0").status_code == 400


def test_the_audit_page_links_its_views_and_export_only_for_admins(operator):
    """Events, Decisions and Checkpoints are linked from the page; Export shows to an admin, not a viewer."""
    write_log("t1", LOG[:3])
    admin = client_of(operator, "op").get("/audit/t1/?actor=alice").content.decode()
    viewer = client_of(operator, "viewer").get("/audit/t1/").content.decode()
    assert 'href="/audit/t1/export/"' in admin and "/export/" not in viewer
    assert 'href="/audit/t1/decisions/?actor=alice"' in admin
    assert 'href="/audit/t1/checkpoints/"' in viewer
    assert (
        'aria-current="page">Audit</a>'
        in client_of(operator, "viewer").get("/audit/t1/decisions/").content.decode()
    )


# -- a run's trail ---------------------------------------------------------------------------


def test_a_runs_page_links_to_its_audit_trail_which_lists_its_events_only(operator, brokerage_path):
    """The run page's link filters the audit page by the run's id (escaped in the URL, even with a colon):
    its events only, not those of run r:1."""
    run, _ = run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id="r:1.x")
    mine = [
        Spec(100 + i, datetime(2026, 12, 5, i, tzinfo=UTC), "op", "gateway.call", "r:1.x", "t")
        for i in range(3)
    ]
    others = [
        Spec(200 + i, datetime(2026, 12, 5, i, tzinfo=UTC), "op", "gateway.call", "r:1", "t")
        for i in range(2)
    ]
    write_log("t1", mine + others)
    client = client_of(operator, "viewer")
    page = client.get(f"/runs/t1/{run.run_id}/").content.decode()
    link = re.search(r'<a href="(/audit/t1/\?run=[^"]+)">This run\'s audit trail</a>', page)
    assert link and link.group(1) == "/audit/t1/?run=r%3A1.x"
    trail = client.get(link.group(1).replace("&amp;", "&"))
    # ...and the run.requested its start appended: the store keeps each event's run id.
    assert list(rows(trail.content.decode())) == [102, 101, 100, 1]


def test_every_kind_is_found_by_its_kind_on_the_events_page(operator):
    """``kind=`` keeps exactly that kind's event, for each kind the product writes."""
    kinds = append_every_kind("t1")
    client = client_of(operator, "viewer")
    for seq, kind in enumerate(kinds, start=1):
        shown = rows(client.get(f"/audit/t1/?kind={kind}").content.decode())
        assert list(shown) == [seq], kind


def test_a_member_of_two_tenants_switches_between_their_decisions(operator):
    """The tenants' links keep the view: from t1's Decisions to t2's Decisions."""
    Membership.objects.create(user=operator, tenant=Tenant.objects.create(slug="t2"), role=Role.ADMIN)
    page = client_of(operator, "op").get("/audit/t1/decisions/").content.decode()
    assert 'href="/audit/t2/decisions/"' in page


def test_through_the_store_filters_and_a_signed_checkpoint_show_as_written(operator):
    """LOG appended by the product's log: filters find what the rows say, and the checkpoint
    the site signs covers each event, with its key's name, on the event's page and the list."""
    from audit.checkpoints import log_origin, sign_checkpoint

    append_log("t1")
    assert sign_checkpoint("t1") is not None
    client = client_of(operator, "viewer")
    page = client.get("/audit/t1/?run=r-2&q=created:>=2026-12-02").content.decode()
    assert list(rows(page)) == [s.seq for s in reversed(LOG) if s.run_id == "r-2" and s.at.day >= 2]
    proof = html.unescape(client.get("/audit/t1/events/7/").content.decode())
    assert "Checked: in checkpoint 1 of size 30, signed by" in proof
    assert f"by {log_origin('t1')}" in proof
    listed = client.get("/audit/t1/checkpoints/").content.decode()
    assert 'id="cp-30"' in listed and log_origin("t1") in html.unescape(listed)
