"""GET /audit/events with filters: the console's filters, checked by the same schema; bad
values are 422 naming the field; pages in both directions; another tenant's events never."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.models import AuditEvent
from audit.selectors import DECISION_KINDS
from tests.site.audit.review_log import LOG, UNSEQUENCED_ACTOR, hold_sequencing, write_log

pytestmark = pytest.mark.django_db


@pytest.fixture
def log(keys, monkeypatch):
    """t1 and t2 each hold LOG (same run ids, actors and times) and three events a sequencer
    at work has not numbered yet."""
    hold_sequencing(monkeypatch)
    write_log("t1", unsequenced=3)
    write_log("t2", unsequenced=3)
    AuditEvent.objects.filter(tenant_id="t2").update(actor="t2-person")


def seqs(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [item["seq"] for item in response.json()["items"]]


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


CASES = [
    ({"kind": "loop.reconciled"}, lambda s: s.kind == "loop.reconciled"),
    ({"actor": "alice", "tool": "place_order"}, lambda s: s.actor == "alice" and s.tool == "place_order"),
    ({"run": "r-2"}, lambda s: s.run_id == "r-2"),
    ({"from": "2026-12-02", "to": "2026-12-02"}, lambda s: day("2026-12-02") <= s.at < day("2026-12-03")),
    ({"q": "created:<=2026-12-01 actor:bob"}, lambda s: s.at < day("2026-12-02") and s.actor == "bob"),
    ({"q": "r-4"}, lambda s: s.run_id == "r-4"),
    ({"decisions": "true", "run": "r-1"}, lambda s: s.kind in DECISION_KINDS and s.run_id == "r-1"),
]


@pytest.mark.parametrize(("query", "keep"), CASES, ids=[str(q) for q, _ in CASES])
def test_the_filters_combine_as_on_the_console(client, log, query, keep):
    """Oldest first by default, newest first on request; exactly the caller's tenant's matching events."""
    expected = [s.seq for s in LOG if keep(s)]
    assert expected
    assert seqs(client.get("/audit/events", query)) == expected
    assert seqs(client.get("/audit/events", {**query, "newest_first": "true"})) == expected[::-1]


def test_run_and_tool_are_in_each_item(client, log):
    """An item carries the run and tool it was filtered by (empty for an event naming none)."""
    items = client.get("/audit/events", {"limit": 7}).json()["items"]
    assert [(i["run_id"], i["tool"]) for i in items] == [(s.run_id, s.tool) for s in LOG[:7]]
    assert items[6]["run_id"] == "" and items[6]["tool"] == ""


def test_pages_reach_every_matching_event_in_both_directions(client, log):
    """after_seq pages oldest first, before_seq newest first; each next_* continues; every match once."""
    query = {"actor": "bob", "limit": 3}
    expected = [s.seq for s in LOG if s.actor == "bob"]
    forward, after = [], None
    while True:
        page = client.get("/audit/events", {**query, **({"after_seq": after} if after else {})}).json()
        forward += [i["seq"] for i in page["items"]]
        assert page["next_before_seq"] is None
        after = page["next_after_seq"]
        if after is None:
            break
    assert forward == expected
    backward, before = [], None
    while True:
        params = {**query, "newest_first": "true", **({"before_seq": before} if before else {})}
        page = client.get("/audit/events", params).json()
        backward += [i["seq"] for i in page["items"]]
        assert page["next_after_seq"] is None
        before = page["next_before_seq"]
        if before is None:
            break
    assert backward == expected[::-1]
    window = client.get("/audit/events", {"actor": "bob", "after_seq": 4, "before_seq": 20}).json()
    assert [i["seq"] for i in window["items"]] == [s for s in expected if 4 < s < 20]


def test_another_tenants_events_and_unsequenced_ones_never_appear(api, keys, log):
    """The same run ids in t1 and t2: each key lists its own tenant's; naming the other is 404."""
    t1 = api(keys.t1).get("/audit/events", {"run": "r-1", "limit": 500}).json()["items"]
    t2 = api(keys.t2).get("/audit/events", {"run": "r-1", "limit": 500}).json()["items"]
    assert {i["actor"] for i in t2} == {"t2-person"} and "t2-person" not in {i["actor"] for i in t1}
    assert len(t1) == len(t2) == len([s for s in LOG if s.run_id == "r-1"])
    assert seqs(api(keys.t1).get("/audit/events", {"actor": UNSEQUENCED_ACTOR})) == []
    everything = api(keys.t2).get("/audit/events", {"actor": "t2-person", "limit": 500})
    assert seqs(everything) == [s.seq for s in LOG]
    assert api(keys.t1).get("/audit/events", {"tenant": "t2"}).status_code == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"kind": "Not A Kind"}, "query.kind"),
        ({"run": "/slash"}, "query.run"),
        ({"actor": "a" * 201}, "query.actor"),
        ({"actor": "nul\x00"}, "query.actor"),
        ({"from": "yesterday"}, "query.from"),
        ({"to": "2026-02-30"}, "query.to"),
        ({"to": "9999-12-31"}, "query.to"),
        ({"q": "created:later"}, "query.q"),
        ({"q": "kind:BAD"}, "query.q"),
        ({"q": "run:/x"}, "query.q"),
        ({"q": "actor:bob", "actor": "alice"}, "query.q"),
        ({"decisions": "maybe"}, "query.decisions"),
        ({"after_seq": -1}, "query.after_seq"),
        ({"before_seq": 2**63}, "query.before_seq"),
        ({"newest_first": "sideways"}, "query.newest_first"),
        ({"limit": 0}, "query.limit"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_value_is_422_naming_its_field(client, log, query, field):
    """invalid_input with the field's name in the detail, never a 500 and never an unfiltered list."""
    response = client.get("/audit/events", query)
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["code"] == "invalid_input" and field in body["detail"], body
