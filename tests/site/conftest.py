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
