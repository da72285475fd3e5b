"""The ``Idempotency-Key`` header of ``POST /runs``: start at most one run per key.

As in the IETF draft (``draft-ietf-httpapi-idempotency-key-header``) and Stripe, the key
is stored with a hash of the request, scoped to a tenant and a user: a repeat returns
the same run and starts nothing, the same key with another request is
IdempotencyKeyReusedError (422), and a repeat while the first request is still in
progress is IdempotencyKeyInProgressError (409). A key is remembered
:data:`IDEMPOTENCY_KEY_TTL`; a first request that died mid-way is taken over by a repeat
after :data:`IN_PROGRESS_TIMEOUT`.

A promise about starting runs, so it lives with them; the router only reads the header.
A ``run_id`` in the request is the other, simpler idempotency: ``run_start`` itself
returns the existing run for a repeated request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from keelgate.canonical import canonical_json
from runs.models import ApiIdempotencyKey, Run
from runs.selectors import run_get
from runs.services import run_start
from sitekit.db import unique_or_none
from sitekit.errors import IdempotencyKeyInProgressError, IdempotencyKeyReusedError
from tenants.models import Tenant

IDEMPOTENCY_KEY_TTL = timedelta(hours=24)
"""A key is remembered this long; after that the same key starts a new run."""
IN_PROGRESS_TIMEOUT = timedelta(minutes=5)
"""A first request still unfinished after this died mid-way: a repeat may take it over."""


def run_start_once(
    *,
    key: str | None,
    request: Mapping[str, Any],
    tenant_id: str,
    agent: str,
    goal: str,
    user: Any,
    run_id: str | None = None,
    limits: dict[str, Any] | None = None,
) -> tuple[Run, bool]:
    """:func:`runs.services.run_start` at most once per (tenant, user, ``key``): the run, and
    whether this call created it. Without a key, ``run_start`` as it is.

    ``request`` is the request as its client sent it (parsed JSON): its hash tells a
    repeat from another request under the same key. The key's claim commits before the
    run starts, so a twin arriving meanwhile sees it in progress instead of starting a
    second run. If the start fails, nothing was started and the key is forgotten, so
    the client can fix the request and retry with it.
    """
    if key is None:
        return run_start(tenant_id=tenant_id, agent=agent, goal=goal, user=user, run_id=run_id, limits=limits)
    fingerprint = hashlib.sha256(canonical_json(dict(request)).encode()).hexdigest()
    row = _claim(tenant_id=tenant_id, user=user, key=key, fingerprint=fingerprint)
    if row.completed_at is not None:
        return run_get(tenant_ids=[tenant_id], run_id=row.run_id), False
    try:
        run, created = run_start(
            tenant_id=tenant_id, agent=agent, goal=goal, user=user, run_id=run_id, limits=limits
        )
    except BaseException:
        ApiIdempotencyKey.objects.filter(pk=row.pk, completed_at__isnull=True).delete()
        raise
    ApiIdempotencyKey.objects.filter(pk=row.pk).update(run_id=run.run_id, completed_at=timezone.now())
    return run, created


def _claim(*, tenant_id: str, user: Any, key: str, fingerprint: str) -> ApiIdempotencyKey:
    """The key's row: a completed one to replay, or a fresh in-progress one that is ours."""
    now = timezone.now()
    scope: dict[str, Any] = {"tenant__slug": tenant_id, "user": user, "key": key}
    try:
        with transaction.atomic():
            row = unique_or_none(ApiIdempotencyKey.objects.select_for_update().filter(**scope))
            if row is not None and now - row.created_at > IDEMPOTENCY_KEY_TTL:
                row.delete()
                row = None
            if row is None:
                return ApiIdempotencyKey.objects.create(
                    tenant=Tenant.objects.get(slug=tenant_id),
                    user=user,
                    key=key,
                    fingerprint=fingerprint,
                    created_at=now,
                )
            if row.fingerprint != fingerprint:
                raise IdempotencyKeyReusedError()
            if row.completed_at is not None:
                return row
            if now - row.created_at < IN_PROGRESS_TIMEOUT:
                raise IdempotencyKeyInProgressError()
            row.created_at = now  # the first request died: this one takes over
            row.save(update_fields=["created_at"])
            return row
    except IntegrityError as exc:
        # A twin inserted the same key between our read and our insert.
        raise IdempotencyKeyInProgressError() from exc
