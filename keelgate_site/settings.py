"""Settings for the Keelgate console, all from the environment.

With nothing set it runs on the embedded default: SQLite under ``var/`` and the
in-memory channel layer. ``DATABASE_URL`` switches to PostgreSQL, ``REDIS_URL`` to Redis
for the channel layer. ``KEELGATE_DEBUG=0`` turns on the production hardening that
``manage.py check --deploy`` asks for.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KEELGATE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _env_bool("KEELGATE_DEBUG", True)
SECRET_KEY = os.environ.get("KEELGATE_SECRET_KEY") or (
    "dev-only-insecure-key-keelgate-console-0123456789abcdef" if DEBUG else ""
)
if not SECRET_KEY:
    raise RuntimeError("KEELGATE_SECRET_KEY must be set when KEELGATE_DEBUG=0")
ALLOWED_HOSTS = [h for h in os.environ.get("KEELGATE_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("KEELGATE_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    # The site's layers, lowest first: each app imports only those above it here.
    "tenants",
    "audit",
    "runs",
    "approvals",
    "notifications",  # webhooks and email, read from the audit chain
    "keelgate_site",  # the assembly: settings, URL maps, asgi, the API, the demo commands
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "keelgate_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "keelgate_site.wsgi.application"
ASGI_APPLICATION = "keelgate_site.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'keelgate.sqlite3'}",
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # IMMEDIATE: a writer takes the lock when its transaction begins, so two writers
    # queue instead of failing half-way with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
    }
    # Tests use a file, not shared-cache memory: threads and worker processes must see
    # the same database and honour the busy timeout.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test_keelgate_{os.getpid()}.sqlite3")}
else:
    # One test database per test process, so two suites on one machine never collide.
    DATABASES["default"]["TEST"] = {"NAME": f"test_keelgate_{os.getpid()}"}

REDIS_URL = os.environ.get("REDIS_URL", "")
CHANNEL_LAYERS = {
    "default": (
        {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = _env_bool("KEELGATE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("KEELGATE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"kv": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "kv"}},
    "loggers": {"keelgate": {"handlers": ["console"], "level": os.environ.get("KEELGATE_LOG_LEVEL", "INFO")}},
}

# -- Keelgate ---------------------------------------------------------------------------

KEELGATE_AGENTS = {
    "paper-trader": "runs.agents.paper_trader.build_agent",
}
"""Agent name -> dotted path of a factory returning a :class:`runs.agents.Agent`."""

KEELGATE_PAPER_BROKERAGE = os.environ.get(
    "KEELGATE_PAPER_BROKERAGE", str(VAR_DIR / "paper_brokerage.sqlite3")
)
"""The demo downstream system of record: its own SQLite file, outside Keelgate's database."""

KEELGATE_LEASE_SECONDS = float(os.environ.get("KEELGATE_LEASE_SECONDS", "30"))

KEELGATE_MONITORS: dict[str, dict[str, object]] = {}
"""Monitor id -> {"tenant", "agent", "goal", "interval_seconds"}: READ-only loops the
worker ticks on a schedule, each tick a run ``<id>.tick-<n>`` (runs/engine/monitors.py)."""

KEELGATE_RUNNER = os.environ.get("KEELGATE_RUNNER", "worker")
"""``worker`` (keelgate_worker claims queued runs) or ``temporal`` (each queued run is
handed to Temporal as a workflow; run ``keelgate_temporal_worker`` instead)."""
KEELGATE_TEMPORAL_ADDRESS = os.environ.get("KEELGATE_TEMPORAL_ADDRESS", "127.0.0.1:7233")
KEELGATE_TEMPORAL_TASK_QUEUE = os.environ.get("KEELGATE_TEMPORAL_TASK_QUEUE", "keelgate")

KEELGATE_CONSOLE_URL = os.environ.get("KEELGATE_CONSOLE_URL", "http://127.0.0.1:8000")
"""Where operators reach the console: the base of links sent in webhooks and email."""

# -- Webhooks (notifications/webhooks/) -------------------------------------------------

KEELGATE_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("KEELGATE_WEBHOOK_TIMEOUT_SECONDS", "10"))
"""A whole request (connect, send, response) must finish in this time or it is cut off."""
_RETRY_SCHEDULE = os.environ.get("KEELGATE_WEBHOOK_RETRY_SCHEDULE", "5,300,1800,7200,18000,36000,36000")
KEELGATE_WEBHOOK_RETRY_SCHEDULE = [float(s) for s in _RETRY_SCHEDULE.split(",")]
"""Seconds before each retry (the Standard Webhooks schedule); when it runs out, the delivery fails."""
KEELGATE_WEBHOOK_LEASE_SECONDS = float(os.environ.get("KEELGATE_WEBHOOK_LEASE_SECONDS", "60"))
"""A deliverer that claimed a message and went silent this long is presumed dead; another retries it."""
KEELGATE_WEBHOOK_ALLOW_PRIVATE = os.environ.get("KEELGATE_WEBHOOK_ALLOW_PRIVATE", "") == "1"
"""Allow private, loopback and link-local receivers (SSRF guard off): a closed network only."""
KEELGATE_WEBHOOK_ALLOWED_NETWORKS = [
    n for n in os.environ.get("KEELGATE_WEBHOOK_ALLOWED_NETWORKS", "").split(",") if n.strip()
]
"""Networks (CIDR) allowed although not public, e.g. ``127.0.0.0/8`` for a receiver on this host."""
KEELGATE_WEBHOOK_WORKERS = int(os.environ.get("KEELGATE_WEBHOOK_WORKERS", "4"))
"""Endpoints one ``keelgate_notify`` pass serves side by side, so one slow receiver delays no other."""


def _signing_key() -> str:
    key = os.environ.get("KEELGATE_AUDIT_SIGNING_KEY", "")
    if key:
        return key
    if not DEBUG:
        raise RuntimeError("KEELGATE_AUDIT_SIGNING_KEY must be set when KEELGATE_DEBUG=0")
    # Development only: a key derived from the dev secret, so digests verify across restarts.
    return base64.b64encode(hashlib.sha256(SECRET_KEY.encode()).digest()).decode()


KEELGATE_AUDIT_SIGNING_KEY = _signing_key()
"""Ed25519 private key (32 raw bytes, base64) that signs exported chain-head digests."""

# -- Email (notifications/emails.py) ----------------------------------------------------

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = float(os.environ.get("EMAIL_TIMEOUT", "30"))
"""Seconds per SMTP operation: a hung server must not hold a pass (and its claim) for ever."""
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "keelgate@localhost")
KEELGATE_EMAIL_ENABLED = _env_bool("KEELGATE_EMAIL_ENABLED", bool(os.environ.get("EMAIL_HOST")))
"""Mail what waits for a person. Off unless ``EMAIL_HOST`` is set: setting a mail server is
asking for mail, while a laptop without one should not knock on localhost:25 every second."""
KEELGATE_EMAIL_UNRESOLVED_SECONDS = float(os.environ.get("KEELGATE_EMAIL_UNRESOLVED_SECONDS", "600"))
"""How long an item the chain announced may lack its inbox row before it is not mailed."""

# -- REST API (keelgate_site/api.py) ----------------------------------------------------

KEELGATE_API_RATE_LIMIT = int(os.environ.get("KEELGATE_API_RATE_LIMIT", "600"))
"""Requests per API key per window (0 turns the limit off); over it, 429 with Retry-After."""
KEELGATE_API_RATE_WINDOW = int(os.environ.get("KEELGATE_API_RATE_WINDOW", "60"))
"""The rate limit's window, in seconds."""
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
"""Larger request bodies are refused (413 from the API) before they are parsed."""
CACHES = {
    "default": (
        # Shared by every process, so a key's rate limit holds across web processes.
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "keelgate"}
    )
}
# -- end REST API -----------------------------------------------------------------------
