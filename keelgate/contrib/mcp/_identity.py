"""Which call is which: gateway tool names, and the identity that makes a retry the same call.

MCP's 2026-07-28 revision has no sessions: a client whose response stream broke
re-issues the call as a new request with a new id. So a call is known by what it asks,
not by its request: within one MCP run, the same tool with the same arguments (their
RFC 8785 bytes) is the same call, unless the client passes its own key in ``_meta``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785

__all__ = [
    "IDEMPOTENCY_KEY_META",
    "REPLAYED_META",
    "RUN_ID_HEADER",
    "RUN_ID_META",
    "SEPARATOR",
    "CallIdentity",
    "IdentityError",
    "call_identity",
    "canonical_arguments",
    "check_upstream_name",
    "gateway_name",
    "split_name",
]

SEPARATOR = "__"
"""Between the upstream's name and its tool's: ``github__create_issue``."""
RUN_ID_META = "io.keelgate/run_id"
"""``_meta`` key: the MCP run a call belongs to (``Keelgate-Run-Id`` header likewise)."""
RUN_ID_HEADER = "Keelgate-Run-Id"
IDEMPOTENCY_KEY_META = "io.keelgate/idempotency_key"
"""``_meta`` key: the client's own identity of a call, in place of its arguments."""
REPLAYED_META = "io.keelgate/replayed"
"""``_meta`` key of a result: this call had arrived before; the result is its first outcome."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
"""An upstream name: letters, digits, ``_.-``; never two underscores in a row."""
_CLIENT_ID = re.compile(r"[\x21-\x7e]{1,128}")
"""A client's run id or key: 1 to 128 printable ASCII characters."""


class IdentityError(ValueError):
    """A name, run id or key the gateway cannot use (the message says which)."""


def check_upstream_name(name: str) -> str:
    """``name`` if it can prefix tool names unambiguously, else :class:`IdentityError`."""
    if not _NAME.fullmatch(name) or SEPARATOR in name:
        raise IdentityError("an upstream name has 1 to 63 letters, digits or _.- and no '__'")
    return name


def gateway_name(upstream: str, tool: str) -> str:
    """The tool as the gateway offers it: ``<upstream>__<tool>``."""
    return f"{check_upstream_name(upstream)}{SEPARATOR}{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """``(upstream, tool)`` of a gateway tool name, or None when it names no upstream."""
    upstream, sep, tool = name.partition(SEPARATOR)
    if not sep or not tool or not _NAME.fullmatch(upstream):
        return None
    return upstream, tool


def canonical_arguments(arguments: Mapping[str, Any]) -> bytes:
    """The RFC 8785 bytes of a call's arguments (IdentityError for what JCS cannot write)."""
    try:
        return bytes(rfc8785.dumps(dict(arguments)))
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise IdentityError(f"arguments: {exc}") from exc


@dataclass(frozen=True)
class CallIdentity:
    """Where a call lives in Keelgate: its MCP run and the Keelgate run that is this call."""

    mcp_run: str
    run_id: str
    """``mcp-<hash>``: the same for every arrival of the same call, in any process."""
    by_client_key: bool


def call_identity(
    *,
    tenant_id: str,
    mcp_run: str,
    tool: str,
    arguments: Mapping[str, Any],
    client_key: str | None = None,
) -> CallIdentity:
    """The identity of one call: the same inputs always give the same ``run_id``.

    With ``client_key`` the client decides what is a repeat (its key, within its run);
    without one it is the tool and the canonical arguments. The tenant is hashed in too,
    so two tenants never share a call.
    """
    if not _CLIENT_ID.fullmatch(mcp_run):
        raise IdentityError("the run id has 1 to 128 printable ASCII characters")
    if client_key is not None and not _CLIENT_ID.fullmatch(client_key):
        raise IdentityError("the idempotency key has 1 to 128 printable ASCII characters")
    what: Any = {"key": client_key} if client_key is not None else {"arguments": dict(arguments)}
    payload = canonical_arguments({"tenant": tenant_id, "run": mcp_run, "tool": tool, **what})
    digest = hashlib.sha256(payload).hexdigest()[:40]
    return CallIdentity(mcp_run=mcp_run, run_id=f"mcp-{digest}", by_client_key=client_key is not None)
