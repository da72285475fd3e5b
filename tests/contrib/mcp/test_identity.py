"""A retry is the same call: the identity of an MCP call, and the gateway's tool names."""

from __future__ import annotations

import pytest

from keelgate.contrib.mcp import (
    IdentityError,
    SchemaViolation,
    call_identity,
    check_arguments,
    gateway_name,
    offered_schema,
    split_name,
)


def _id(**kw):
    base = {"tenant_id": "acme", "mcp_run": "r1", "tool": "u__send", "arguments": {"a": 1, "b": [1.0, "x"]}}
    return call_identity(**{**base, **kw}).run_id


def test_the_same_call_has_the_same_run_whatever_the_key_order_or_number_spelling():
    """RFC 8785: key order and 1.0 vs 1 do not make a new call."""
    assert _id() == _id(arguments={"b": [1, "x"], "a": 1})
    assert _id().startswith("mcp-")


def test_a_different_tenant_run_tool_or_argument_is_another_call():
    """Each part of the identity counts: two tenants or two runs never share a call."""
    first = _id()
    assert (
        len({first, _id(tenant_id="other"), _id(mcp_run="r2"), _id(tool="u__x"), _id(arguments={"a": 2})})
        == 5
    )


def test_a_client_key_replaces_the_arguments():
    """With the client's key, the same key is the same call even with other arguments."""
    assert _id(client_key="k", arguments={"a": 1}) == _id(client_key="k", arguments={"a": 2})
    assert _id(client_key="k") != _id(client_key="k2")
    assert _id(client_key="k") != _id()


@pytest.mark.parametrize("kw", [{"mcp_run": ""}, {"mcp_run": "x" * 129}, {"client_key": "a b"}])
def test_an_unusable_run_id_or_key_is_refused(kw):
    """Empty, too long or non-printable ids are IdentityError."""
    with pytest.raises(IdentityError):
        _id(**kw)


def test_arguments_rfc_8785_cannot_write_are_refused():
    """An integer beyond 2**53 has no canonical form: IdentityError, not a silent key."""
    with pytest.raises(IdentityError):
        _id(arguments={"n": 2**60})


def test_tool_names_join_and_split_on_the_double_underscore():
    """``u__tool``; a tool name may itself contain ``__``; an upstream name may not."""
    assert gateway_name("github", "create_issue") == "github__create_issue"
    assert split_name("github__create__issue") == ("github", "create__issue")
    assert split_name("nounderscore") is None
    assert split_name("__x") is None
    with pytest.raises(IdentityError):
        gateway_name("a__b", "t")


SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "n": {"type": "integer"}, "key": {"type": "string"}},
    "required": ["to", "key"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "to"),
        ({"to": 1}, "to"),
        ({"to": "a", "n": "x"}, "n"),
        ({"to": "a", "zz": 1}, "zz"),
        ({"to": "a", "key": "k"}, "key"),
    ],
)
def test_arguments_failing_the_schema_name_the_field(arguments, field):
    """Missing, mistyped, unexpected, or the gateway's own key argument: the field is named."""
    with pytest.raises(SchemaViolation) as caught:
        check_arguments(offered_schema(SCHEMA, "key"), arguments, reserved="key")
    assert caught.value.field == field


def test_the_offered_schema_hides_the_key_argument():
    """The client never sees, and never has to send, the argument that carries the key."""
    shown = offered_schema(SCHEMA, "key")
    assert "key" not in shown["properties"] and shown["required"] == ["to"]
    check_arguments(shown, {"to": "a"}, reserved="key")
    assert "key" in SCHEMA["properties"]  # the upstream's own schema is untouched
