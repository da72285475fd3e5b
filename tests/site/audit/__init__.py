"""Tests of the audit app: verification, digests, tampering in SQL, concurrent appends.

Holds the one helper the process-spawning tests share: the environment a child
process needs to open the very database the test is using.
"""

from __future__ import annotations

import os
from urllib.parse import quote

from django.conf import settings
from django.db import connection


def child_env() -> dict[str, str]:
    """``os.environ`` plus what points a child ``manage.py``/``django.setup()`` at the test DB.

    Only meaningful under ``transactional_db``: the child sees committed rows only.
    """
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        url = f"sqlite:///{os.path.abspath(db['NAME'])}"
    elif connection.vendor == "postgresql":
        user = quote(db.get("USER") or "", safe="")
        password = db.get("PASSWORD") or ""
        auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
        host = db.get("HOST") or "localhost"
        port = f":{db['PORT']}" if db.get("PORT") else ""
        url = f"postgres://{auth}{host}{port}/{quote(db['NAME'], safe='')}"
    else:  # pragma: no cover - the suite runs on SQLite and PostgreSQL only
        raise NotImplementedError(connection.vendor)
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="keelgate_site.settings",
        DATABASE_URL=url,
        KEELGATE_VAR_DIR=str(settings.VAR_DIR),
        # The same signing key, whatever the parent derived or was given.
        KEELGATE_AUDIT_SIGNING_KEY=settings.KEELGATE_AUDIT_SIGNING_KEY,
        PYTHONPATH=os.pathsep.join(p for p in (str(settings.BASE_DIR), env.get("PYTHONPATH", "")) if p),
    )
    return env
