"""Fixtures of the API tests: tenants t1 and t2 with an admin key each, a viewer key, clients.

Tenant t1 comes from the ``operator`` fixture (``op`` is its admin, ``viewer`` its
viewer); t2 gets the admin ``other``. ``client`` speaks for op in t1; ``api(key)`` makes
a client for any key. ``pending`` and ``pending_t2`` are runs stopped on an approval.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from approvals.models import Approval
from runs.engine.worker import Worker
from runs.services import run_start
from tenants.models import Membership, Role, Tenant
from tests.site._keys import key_row

BASE = "/api/v1"


class Api:
    """A django.test.Client that sends one API key and speaks JSON."""

    def __init__(self, key: str | None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = Client(headers=headers)

    def get(self, path: str, params: dict[str, Any] | None = None, **headers: str) -> Any:
        """GET ``/api/v1`` + path."""
        return self.http.get(BASE + path, params or {}, headers=headers)

    def post(self, path: str, body: Any = None, *, raw: bytes | str | None = None, **headers: str) -> Any:
        """POST a JSON body (or ``raw`` bytes) to ``/api/v1`` + path."""
        data = raw if raw is not None else ("" if body is None else json.dumps(body))
        return self.http.post(BASE + path, data=data, content_type="application/json", headers=headers)


@dataclass(frozen=True)
class Keys:
    """The full keys of the test users."""

    t1: str
    t2: str
    viewer: str


@pytest.fixture(autouse=True)
def _fresh_cache(settings):
    """A cache of this test's own, so rate-limit counts never leak between tests."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"api-tests-{uuid.uuid4().hex}",
        }
    }


@pytest.fixture
def t2(transactional_db):
    """Tenant t2 with its admin ``other``."""
    tenant = Tenant.objects.create(slug="t2", name="T2")
    other = get_user_model().objects.create_user("other", password="pw-other-123456")
    Membership.objects.create(user=other, tenant=tenant, role=Role.ADMIN)
    return tenant


@pytest.fixture
def keys(operator, t2) -> Keys:
    """An admin key in t1 (op), an admin key in t2 (other), a viewer key in t1; as bare rows, so
    the chains start empty (``tests/site/tenants`` tests ``api_key_create`` and its event)."""
    User = get_user_model()
    t1 = Tenant.objects.get(slug="t1")
    return Keys(
        t1=key_row(tenant=t1, user=operator, name="op"),
        t2=key_row(tenant=t2, user=User.objects.get(username="other"), name="other"),
        viewer=key_row(tenant=t1, user=User.objects.get(username="viewer"), name="viewer"),
    )


@pytest.fixture
def api(keys):
    """``api(key)``: a client for that key (``api(None)``: no credentials)."""
    return Api


@pytest.fixture
def client(keys) -> Api:
    """A client with op's admin key in t1."""
    return Api(keys.t1)


def drain() -> None:
    """Run the worker until nothing is runnable."""
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass


def start_pending(tenant: str, username: str, run_id: str = "r1", **kwargs: Any) -> Approval:
    """A paper-trader run in ``tenant`` stopped on its order's approval."""
    user = get_user_model().objects.get(username=username)
    run_start(tenant_id=tenant, agent="paper-trader", goal="buy 10 ACME", user=user, run_id=run_id, **kwargs)
    drain()
    return Approval.objects.get(tenant_id=tenant, run_id=run_id)


@pytest.fixture
def pending(keys, brokerage_path) -> Approval:
    """Run r1 of t1, waiting for the approval of its order."""
    return start_pending("t1", "op")


@pytest.fixture
def pending_t2(keys, brokerage_path) -> Approval:
    """Run r2 of t2, waiting for the approval of its order."""
    return start_pending("t2", "other", run_id="r2")
