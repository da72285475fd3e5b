"""The site on its embedded SQLite default needs no PostgreSQL driver.

``make run`` installs the ``django`` extra only; psycopg comes with ``postgres``. The
PostgreSQL implementations sit beside the ORM's and are picked at wiring time, so every
product module must import, and the demo's runs must be driven, with psycopg absent.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("sitekit", "tenants", "audit", "runs", "approvals", "notifications", "keelgate_site")

pytestmark = pytest.mark.slow


def test_every_site_module_imports_and_the_demo_runs_without_psycopg(tmp_path: Path) -> None:
    """With psycopg unimportable, each site module imports, and the demo's runs are driven
    to their approvals on SQLite."""
    script = textwrap.dedent(
        f"""
        import importlib, os, pkgutil, sys
        for name in ("psycopg", "psycopg_pool"):
            sys.modules[name] = None  # any import of it raises ImportError
        os.environ["DJANGO_SETTINGS_MODULE"] = "keelgate_site.settings"
        os.environ.pop("DATABASE_URL", None)
        os.environ["KEELGATE_VAR_DIR"] = {str(tmp_path)!r}
        import django
        django.setup()
        skip = ("sitekit.postgresql.base",)  # Django's engine for PostgreSQL, named only in settings
        for app in {APPS!r}:
            package = importlib.import_module(app)
            for info in pkgutil.walk_packages(package.__path__, app + "."):
                if ".migrations." in info.name or info.name in skip:
                    continue
                importlib.import_module(info.name)
        from django.core.management import call_command
        call_command("migrate", verbosity=0)
        call_command("keelgate_demo", verbosity=0)  # the demo's runs, queued
        call_command("keelgate_worker", once=True, verbosity=0)  # drives them to their waits
        from approvals.models import Approval
        assert Approval.objects.filter(tenant_id="demo").exists()
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
