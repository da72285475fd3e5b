"""The hook by which identity's changes reach the audit chain, one layer up.

Tenants sit below the audit app, so a service here cannot append to a chain itself. It
calls :func:`record` inside its own transaction; the audit app subscribes to
:data:`identity_changed` in its ``AppConfig.ready()`` and appends the event there, so the
change and its event commit together. A change nobody records is refused rather than
left untraced: :func:`record` raises when no receiver is connected.

Each caller names its kind as a literal (``kind="member.added"``), where
``tests/site/audit/test_kinds.py`` reads it; the kinds and their fields are listed in
``audit/kinds.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.dispatch import Signal

__all__ = ["identity_changed", "record"]


identity_changed = Signal()
"""Sent with ``tenant_id``, ``actor``, ``kind`` and ``body`` inside the change's transaction."""


def record(tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
    """Hand one event of ``tenant_id``'s chain to the audit app, in the caller's transaction."""
    answers = identity_changed.send(sender=record, tenant_id=tenant_id, actor=actor, kind=kind, body=body)
    if not answers:
        raise ImproperlyConfigured("No audit log receives tenants.changes.identity_changed.")
