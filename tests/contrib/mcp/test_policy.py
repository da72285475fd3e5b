"""An upstream's policy file: validated, fail closed, mapped onto the engine's RequireApproval."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from keelgate.contrib.mcp import (
    FAIL_CLOSED,
    CallArguments,
    PolicyError,
    UpstreamSpec,
    load_policy,
    upstream_tool,
)
from keelgate.gateway import SideEffect

SPEC = UpstreamSpec(name="u", command="true")


def _tool(name: str, effect: SideEffect = SideEffect.WRITE):
    return upstream_tool(SPEC, name=name, upstream_name=name.split("__")[1], side_effect=effect)


def test_a_tool_the_policy_does_not_name_is_a_write_that_needs_approval(tmp_path):
    """Fail closed: an empty policy makes every tool a WRITE waiting for one person."""
    policy = load_policy({})
    assert policy.for_tool("anything") == FAIL_CLOSED
    assert policy.for_tool("anything").effect is SideEffect.WRITE
    rules = policy.approvals({"u__anything": "anything"})
    found = rules.requirement(agent_id="mcp:u", tool=_tool("u__anything"), arguments=CallArguments())
    assert found is not None and found.approvers == 1


def test_the_operator_may_set_another_default_for_an_upstream():
    """``default`` changes what unnamed tools are: here READs forwarded without asking."""
    policy = load_policy({"default": {"side_effect": "read"}})
    assert policy.for_tool("x").effect is SideEffect.READ
    assert (
        policy.approvals({"u__x": "x"}).requirement(
            agent_id="mcp:u", tool=_tool("u__x", SideEffect.READ), arguments=CallArguments()
        )
        is None
    )


def test_a_toml_file_maps_every_approval_field_onto_require_approval(tmp_path):
    """Four-eyes, high impact, expiry, escalation and warning all reach the engine's requirement."""
    path = tmp_path / "policy.toml"
    path.write_text(
        """
timeout_seconds = 5
[tools.lookup]
side_effect = "read"
[tools.send]
idempotency_argument = "key"
[tools.send.approval]
approvers = 2
high_impact = true
expires_after_seconds = 60
on_expiry = "escalate"
escalate_to = "admin"
escalate_after_seconds = 120
warn_before_seconds = 10
"""
    )
    policy = load_policy(path)
    assert policy.timeout_seconds == 5
    assert policy.for_tool("lookup").rule is None
    assert policy.for_tool("send").idempotency_argument == "key"
    found = policy.approvals({"u__send": "send"}).requirement(
        agent_id="mcp:u", tool=_tool("u__send"), arguments=CallArguments()
    )
    assert found is not None
    assert (found.approvers, found.high_impact, found.on_expiry, found.escalate_to) == (
        2,
        True,
        "escalate",
        "admin",
    )
    assert found.expires_after == timedelta(seconds=60)
    assert found.escalate_after == timedelta(seconds=120)
    assert found.warn_before == timedelta(seconds=10)


def test_a_json_file_is_read_by_its_suffix(tmp_path):
    """``.json`` files are JSON; the content is the same schema."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"tools": {"send": {"approval": True}}}))
    assert load_policy(path).for_tool("send").rule is not None


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"tools": {"send": {"side_effect": "delete"}}}, "side_effect"),
        ({"tools": {"send": {"approvals": 2}}}, "approvals"),
        ({"tools": {"lookup": {"side_effect": "read", "idempotency_argument": "k"}}}, "idempotency_argument"),
        ({"tools": {"send": {"approval": {"on_expiry": "escalate"}}}}, "escalate"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"default": {"approval": {"approvers": 0}}}, "approvers"),
        ({"default": {"approval": {"approvals": 11}}}, "approvals"),
        ({"default": {"approval": {"approvals": 3, "approvers": 3}}}, "not both"),
    ],
)
def test_a_bad_policy_is_refused_naming_what_is_wrong(data, names):
    """Unknown keys, bad classes, a key for a READ, an expiry the engine refuses: PolicyError."""
    with pytest.raises(PolicyError, match=names):
        load_policy(data)


def test_an_unreadable_file_is_a_policy_error(tmp_path):
    """Broken TOML is PolicyError with the file's name, not a crash."""
    path = tmp_path / "p.toml"
    path.write_text("tools = [")
    with pytest.raises(PolicyError, match=r"p\.toml"):
        load_policy(path)


def test_approvals_and_approver_roles_reach_the_engine():
    """approvals = 3 with approver_roles: the engine's requirement asks three people of those roles."""
    policy = load_policy({"default": {"approval": {"approvals": 3, "approver_roles": ["admin"]}}})
    rules = policy.approvals({"u__send": "send"})
    found = rules.requirement(agent_id="mcp:u", tool=_tool("u__send"), arguments=CallArguments())
    assert found is not None and (found.approvers, found.approver_roles) == (3, ("admin",))
