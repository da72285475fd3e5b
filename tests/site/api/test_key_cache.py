"""The per-process cache of verified API keys: what it saves, and how long it may be wrong.

A key verified once is not looked up again for ``KEELGATE_API_KEY_CACHE_SECONDS``. A
change made in this process (``api_key_revoke``, a membership or user saved or deleted)
empties the cache at once; a change made by another process (here: SQL that sends no
Django signal) is seen at most that many seconds later, and never lets a write through.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tenants import api_auth
from tenants.api_keys import api_key_revoke
from tenants.models import ApiKey, Membership

from .conftest import Api
from .test_errors import assert_error

TTL = 5.0


@pytest.fixture(autouse=True)
def _cache(settings, monkeypatch):
    """An empty cache, the default bound, and a clock the test moves."""
    settings.KEELGATE_API_KEY_CACHE_SECONDS = TTL
    api_auth.key_cache_clear()
    now = [1000.0]
    monkeypatch.setattr(api_auth, "_clock", lambda: now[0])
    yield now
    api_auth.key_cache_clear()


def _sql(statement: str, *params: object) -> None:
    """A change as another process makes it: plain SQL, no signal reaches this process."""
    with connection.cursor() as cursor:
        cursor.execute(statement, list(params))


def test_a_cached_key_costs_no_query_for_the_key(keys):
    """The second request with a key does not read api keys or memberships."""
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/runs").status_code == 200
    tables = " ".join(q["sql"] for q in captured.captured_queries)
    assert "tenants_apikey" not in tables and "tenants_membership" not in tables
    assert len(captured.captured_queries) >= 1  # the page itself


def test_revoking_a_key_stops_it_at_once_in_this_process(keys):
    """api_key_revoke (an UPDATE, no post_save) empties the cache: the next request is 401."""
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    api_key_revoke(by="tester", key=ApiKey.objects.get(name="op"))
    assert_error(client.get("/runs"), 401, "unauthenticated")


def test_a_key_revoked_by_another_process_works_at_most_the_bound(keys, _cache):
    """Revoked behind this process's back: still accepted until the bound, 401 from then on."""
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    _sql("UPDATE tenants_apikey SET revoked_at = %s WHERE name = %s", timezone.now(), "op")
    _cache[0] += TTL - 0.5
    assert client.get("/runs").status_code == 200  # inside the documented bound
    _cache[0] += 0.5
    assert_error(client.get("/runs"), 401, "unauthenticated")


def test_with_the_cache_off_a_revocation_elsewhere_is_seen_at_once(keys, settings):
    """KEELGATE_API_KEY_CACHE_SECONDS = 0: every request looks its key up."""
    settings.KEELGATE_API_KEY_CACHE_SECONDS = 0
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    _sql("UPDATE tenants_apikey SET revoked_at = %s WHERE name = %s", timezone.now(), "op")
    assert_error(client.get("/runs"), 401, "unauthenticated")


def test_removing_a_membership_stops_the_key_at_once_in_this_process(keys, operator):
    """Deleting the membership through the ORM (admin, commands) empties the cache."""
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    Membership.objects.filter(user=operator, tenant__slug="t1").delete()
    assert_error(client.get("/runs"), 401, "unauthenticated")


def test_a_member_removed_by_another_process_reads_at_most_the_bound_and_never_writes(
    keys, operator, pending, _cache
):
    """Inside the bound the cached key still reads; a write is refused at once (the service
    checks the membership in the database); after the bound the key is 401."""
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    _sql("DELETE FROM tenants_membership WHERE user_id = %s", operator.pk)
    assert client.get("/runs").status_code == 200  # a read inside the bound
    refused = client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
    assert_error(refused, 404, "not_found")
    pending.refresh_from_db()
    assert pending.status == "pending"
    _cache[0] += TTL
    assert_error(client.get("/runs"), 401, "unauthenticated")


def test_a_role_lowered_by_another_process_cannot_approve_from_the_cache(keys, operator, pending):
    """The cached key does not carry the old role into a write: the service reads the new one."""
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    _sql("UPDATE tenants_membership SET role = %s WHERE user_id = %s", "viewer", operator.pk)
    assert_error(
        client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash}),
        403,
        "forbidden",
    )
    pending.refresh_from_db()
    assert pending.status == "pending"


def test_deactivating_the_user_stops_the_key_at_once(keys, operator):
    """A user saved inactive empties the cache; the key's next request is 401."""
    client = Api(keys.t1)
    assert client.get("/runs").status_code == 200
    user = get_user_model().objects.get(pk=operator.pk)
    user.is_active = False
    user.save()
    assert_error(client.get("/runs"), 401, "unauthenticated")


def test_a_wrong_secret_for_a_cached_key_is_refused(keys):
    """The cache holds whole tokens: the right prefix with another secret is looked up and refused."""
    assert Api(keys.t1).get("/runs").status_code == 200
    wrong = keys.t1[:-1] + ("A" if keys.t1[-1] != "A" else "B")
    assert_error(Api(wrong).get("/runs"), 401, "unauthenticated")
    assert Api(keys.t1).get("/runs").status_code == 200


def test_a_cached_key_stays_in_its_own_tenant(keys):
    """A key cached in t1 still cannot name t2 (404), and t2's key sees only t2."""
    t1 = Api(keys.t1)
    assert t1.get("/runs").status_code == 200
    assert_error(t1.get("/runs", {"tenant": "t2"}), 404, "not_found")
    assert Api(keys.t2).get("/runs").status_code == 200
    assert_error(Api(keys.t2).get("/runs", {"tenant": "t1"}), 404, "not_found")
