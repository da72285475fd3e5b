"""Fixtures of the Django tests: they run on SQLite by default, on PostgreSQL with DATABASE_URL."""

from __future__ import annotations

import os

import pytest
from django.db import connection


@pytest.fixture(autouse=True, scope="session")
def _require_postgres_in_ci(django_db_setup, django_db_blocker):
    """With CI=true and DATABASE_URL set, the database must really be PostgreSQL."""
    if os.environ.get("CI") == "true" and os.environ.get("DATABASE_URL", "").startswith("postgres"):
        with django_db_blocker.unblock():
            assert connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """A cheap hasher, as Django's testing guide advises: PBKDF2 cost 0.3 s per test user.

    Passwords are still hashed and checked (logins in these tests verify them); only the
    deliberate slowness that protects a stolen database is left out.
    """
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True, scope="session")
def _close_thread_connections(django_db_setup, django_db_blocker):
    """Threads in the contract suites leave connections open; end them before teardown."""
    yield
    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.fixture
def brokerage_path(tmp_path, settings):
    """A fresh paper brokerage file for this test, used by every process the test starts."""
    path = str(tmp_path / "brokerage.sqlite3")
    settings.KEELGATE_PAPER_BROKERAGE = path
    return path


@pytest.fixture
def child_env(transactional_db, brokerage_path):
    """Environment for a subprocess (a worker, a script) to use this test's database."""
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    else:
        url = f"sqlite:///{db['NAME']}"
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "keelgate_site.settings",
            "KEELGATE_PAPER_BROKERAGE": brokerage_path,
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture
def operator(transactional_db):
    """User ``op`` with the admin role in tenant ``t1``, and ``viewer`` with the viewer role."""
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Role, Tenant

    tenant = Tenant.objects.create(slug="t1", name="T1")
    User = get_user_model()
    op = User.objects.create_user("op", password="pw-op-123456")
    Membership.objects.create(user=op, tenant=tenant, role=Role.ADMIN)
    viewer = User.objects.create_user("viewer", password="pw-viewer-123456")
    Membership.objects.create(user=viewer, tenant=tenant, role=Role.VIEWER)
    return op
