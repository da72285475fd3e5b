"""Decision events name the exact call, how the decision came, and the arguments only where allowed.

The engine writes ``arguments_hash`` (the ``canonical_sha256`` an approval is given for)
on every event about a call; the arguments themselves only when the gateway's
``audit_arguments`` allows them for the tenant; and the host's
:class:`~keelgate.loop.DecisionContext` beside a person's decision.
"""

from __future__ import annotations

import json

import pytest

from keelgate.canonical import canonical_sha256
from keelgate.errors import ConfirmationRequiredError
from keelgate.gateway import RequireApproval
from keelgate.loop import DecisionContext, StopReason
from tests.conftest import act, answer, buy
from tests.unit.test_loop_decisions import _unknown_run

API = DecisionContext(via="api", key_id="12", address="10.0.0.4")
ORDER = buy(quantity=10)


def events(w, kind):
    return [e.body for e in w.audit.events("t1") if e.kind == kind]


async def waiting(world, *, allowed=False, **policy):
    w = world([act(ORDER), answer("done")], policy=RequireApproval(["place_order"], **policy))
    loop = w.loop()
    loop.gateway.audit_arguments = allowed
    result = await w.start(loop)
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    return w, loop


def _hash(w):
    return canonical_sha256(w.checkpoints.load("t1", "run-1").action("1-1").arguments)


async def test_by_default_every_event_of_the_call_carries_its_hash_and_never_its_arguments(world):
    """approval.requested, approval.decided and gateway.call: the same arguments_hash, no arguments."""
    w, loop = await waiting(world)
    loop.approve("t1", "run-1", "1-1", by="alice", context=API)
    await w.start(w.loop())  # a new gateway, on its default: hash only
    digest = _hash(w)
    (requested,) = events(w, "approval.requested")
    (decided,) = events(w, "approval.decided")
    calls = [c for c in events(w, "gateway.call") if c["action_id"] == "1-1"]
    assert [requested["arguments_hash"], decided["arguments_hash"]] == [digest, digest]
    assert [c["arguments_hash"] for c in calls] == [digest]
    for body in (requested, decided, *calls):
        assert "arguments" not in body and "ACME" not in json.dumps(body)


async def test_a_decision_says_how_it_came_and_whether_a_high_impact_call_was_confirmed(world):
    """The context's via, key_id and address; high_impact_confirmed only with the confirmation."""
    w, loop = await waiting(world, high_impact=lambda a: True)
    with pytest.raises(ConfirmationRequiredError):
        loop.approve("t1", "run-1", "1-1", by="alice", context=API)
    assert events(w, "approval.decided") == []
    loop.approve("t1", "run-1", "1-1", by="alice", confirmed=True, context=API)
    (decided,) = events(w, "approval.decided")
    assert (decided["via"], decided["key_id"], decided["address"]) == ("api", "12", "10.0.0.4")
    assert decided["high_impact"] is True and decided["high_impact_confirmed"] is True


async def test_without_a_context_the_event_says_nothing_of_a_channel(world):
    """A caller that does not say how (a library user) gets no via, key_id or address."""
    w, loop = await waiting(world)
    loop.deny("t1", "run-1", "1-1", by="alice", note="no")
    (decided,) = events(w, "approval.decided")
    assert decided["arguments_hash"] == _hash(w) and decided["high_impact"] is False
    assert not {"via", "key_id", "address", "high_impact_confirmed"} & set(decided)


async def test_a_policy_that_allows_it_adds_the_arguments(world):
    """audit_arguments=True: the request, the decision and the call carry the arguments as well."""
    w, loop = await waiting(world, allowed=True)
    loop.approve("t1", "run-1", "1-1", by="alice")
    (requested,) = events(w, "approval.requested")
    (decided,) = events(w, "approval.decided")
    assert requested["arguments"] == decided["arguments"] == ORDER.arguments
    assert decided["arguments_hash"] == canonical_sha256(ORDER.arguments)


async def test_the_policy_is_asked_per_tenant(world):
    """A function of the tenant id: only the tenants it names get arguments."""
    w, loop = await waiting(world)
    asked = []
    loop.gateway.audit_arguments = lambda tenant: asked.append(tenant) or tenant == "t2"
    loop.approve("t1", "run-1", "1-1", by="alice")
    (decided,) = events(w, "approval.decided")
    assert "arguments" not in decided and asked and set(asked) == {"t1"}


async def test_an_edit_records_each_changed_field_old_and_new_where_allowed(world):
    """approval.edited: old -> new per field, both full argument sets, both hashes, the context."""
    w, loop = await waiting(world, allowed=True)
    edited = {**ORDER.arguments, "quantity": 5}
    loop.approve("t1", "run-1", "1-1", by="alice", arguments=edited, context=API)
    (event,) = events(w, "approval.edited")
    assert event["changes"] == {"quantity": {"old": 10, "new": 5}}
    assert event["arguments"] == ORDER.arguments and event["edited_arguments"] == edited
    assert event["edited_hash"] == canonical_sha256(edited)
    assert event["original_hash"] == canonical_sha256(ORDER.arguments)
    assert (event["via"], event["key_id"]) == ("api", "12")


async def test_an_edit_without_the_policy_names_the_fields_and_hashes_only(world):
    """Hash only: changed field names and both hashes, no value of either call."""
    w, loop = await waiting(world)
    loop.approve("t1", "run-1", "1-1", by="alice", arguments={**ORDER.arguments, "quantity": 5})
    (event,) = events(w, "approval.edited")
    assert event["changed"] == ["quantity"]
    assert not {"changes", "arguments", "edited_arguments"} & set(event)


async def test_a_reconcile_names_the_call_and_how_it_came(world):
    """loop.reconciled by a person: the unknown call's hash and the context (no result, no arguments)."""
    w = world([act(ORDER), answer("done")])
    loop, _ = await _unknown_run(w)
    await loop.reconcile("t1", "run-1", "1-1", executed=False, by="bob", note="not there", context=API)
    (settled,) = [e for e in events(w, "loop.reconciled") if e["source"] == "human"]
    assert settled["arguments_hash"] == canonical_sha256(ORDER.arguments)
    assert (settled["via"], settled["address"]) == ("api", "10.0.0.4") and "arguments" not in settled


async def test_a_cancel_names_each_withdrawn_call(world):
    """run.cancelled: the withdrawn ids as before, and each call's hash, with the context."""
    w, loop = await waiting(world)
    loop.cancel("t1", "run-1", by="alice", context=DecisionContext(via="console", address="10.0.0.5"))
    (cancelled,) = events(w, "run.cancelled")
    assert cancelled["withdrawn"] == ["1-1"]
    assert cancelled["withdrawn_calls"] == [
        {"action_id": "1-1", "tool": "place_order", "arguments_hash": canonical_sha256(ORDER.arguments)}
    ]
    assert (cancelled["via"], cancelled["address"]) == ("console", "10.0.0.5")


def test_a_context_gives_only_what_it_knows():
    """fields(): via always, key_id and address only when set."""
    assert DecisionContext(via="chat").fields() == {"via": "chat"}
    assert API.fields() == {"via": "api", "key_id": "12", "address": "10.0.0.4"}
