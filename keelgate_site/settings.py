"""Settings for the Keelgate console, all from the environment.

With nothing set it runs on the embedded default: SQLite under ``var/`` and the
in-memory channel layer. ``DATABASE_URL`` switches to PostgreSQL, ``REDIS_URL`` to Redis
for the channel layer. ``KEELGATE_DEBUG=0`` turns on the production hardening that
``manage.py check --deploy`` asks for.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KEELGATE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


# Three modes, by KEELGATE_DEBUG: "1" development (what `make run` asks for: DEBUG on,
# loopback only), "0" production (keys required, HTTPS hardening), unset the local
# default (DEBUG off, keys generated under var/, plain HTTP on loopback).
PRODUCTION = os.environ.get("KEELGATE_DEBUG", "").strip() != "" and not _env_bool("KEELGATE_DEBUG", False)
DEBUG = _env_bool("KEELGATE_DEBUG", False)
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def _local_secret_key() -> str:
    """A random key made once per var/ folder (mode 0600), so sessions survive restarts."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        scratch = path.with_name(f".secret_key.{os.getpid()}")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(base64.b64encode(os.urandom(48)).decode())
        try:
            os.link(scratch, path)  # the first process to link wins; others read its key
        except FileExistsError:
            pass
        finally:
            scratch.unlink()
    return path.read_text().strip()


SECRET_KEY = os.environ.get("KEELGATE_SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        raise RuntimeError("KEELGATE_SECRET_KEY must be set when KEELGATE_DEBUG=0")
    SECRET_KEY = "dev-only-insecure-key-keelgate-console-0123456789abcdef" if DEBUG else _local_secret_key()
ALLOWED_HOSTS = [h for h in os.environ.get("KEELGATE_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
if DEBUG and set(ALLOWED_HOSTS) - LOOPBACK_HOSTS:
    # DEBUG pages show settings and URL patterns: never to anyone but this machine.
    raise RuntimeError("KEELGATE_DEBUG=1 serves loopback only: KEELGATE_ALLOWED_HOSTS must be loopback names")
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
    "ninja",  # Swagger UI's files served from here (the API docs need no CDN)
    "axes",  # login throttling and lock-out (tenants/lockout.py)
    # The site's layers, lowest first: each app imports only those above it here.
    "tenants",
    "audit",
    "runs",
    "approvals",
    "notifications",  # webhooks and email, read from the audit chain
    "keelgate_site",  # the assembly: settings, URL maps, asgi, the API, the demo commands
]
if importlib.util.find_spec("mcp") is not None:  # the MCP gateway needs the mcp extra
    INSTALLED_APPS.insert(INSTALLED_APPS.index("keelgate_site"), "mcp_gateway")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it answers a locked-out login
]
AUTHENTICATION_BACKENDS = [
    "tenants.lockout.LoginThrottleBackend",  # first: a locked-out pair never reaches the password check
    "django.contrib.auth.backends.ModelBackend",
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

# KEELGATE_DB_CONN_MAX_AGE: seconds a process keeps its database connection (checked
# before reuse); 0, the default, opens one per request. Under Daphne it saves nothing:
# Django runs each request's sync code in a thread of its own (asgiref), and a kept
# connection belongs to a thread. KEELGATE_DB_POOL=N (PostgreSQL) gives the process a
# psycopg pool of up to N connections instead, which any thread borrows for a request:
# what web processes want (keelgate_serve sets 8; docs/performance.md#pool-check).
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'keelgate.sqlite3'}",
        conn_max_age=int(os.environ.get("KEELGATE_DB_CONN_MAX_AGE", "0")),
        conn_health_checks=True,
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
    # The commit groups (sitekit.postgresql.commits) ask psycopg to prepare their statements
    # (prepare=True), which it does only with a prepare_threshold (Django's default, None,
    # prepares nothing); the ORM's client-side cursors never prepare. KEELGATE_DB_PREPARE=0
    # keeps None and the groups ask for nothing, for a pooler that shares server sessions
    # (PgBouncer in transaction mode).
    KEELGATE_DB_PREPARE = os.environ.get("KEELGATE_DB_PREPARE", "1") != "0"
    if KEELGATE_DB_PREPARE:
        DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5  # psycopg's default
    _POOL = int(os.environ.get("KEELGATE_DB_POOL", "0"))
    if _POOL > 0:
        # Django's backend, but the pool checks a lent connection without a query (a
        # round trip a request): sitekit/postgresql/base.py.
        DATABASES["default"]["ENGINE"] = "sitekit.postgresql"
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses a pool with persistent connections
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(2, _POOL),
            "max_size": _POOL,
        }

KEELGATE_WEB_THREADS = int(os.environ.get("KEELGATE_WEB_THREADS", "0"))
"""Threads a web process runs requests' sync work on (keelgate_site/asgi.py); 0: the event
loop's default pool, min(32, cores + 4)."""

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
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = _env_bool("KEELGATE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("KEELGATE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

KEELGATE_LOG_FORMAT = os.environ.get("KEELGATE_LOG_FORMAT") or (
    "json" if not _env_bool("KEELGATE_DEBUG", True) else "text"
)
"""``json`` (one object per line, the production default) or ``text`` (readable; sitekit/logs.py)."""
_LOG_LEVEL = os.environ.get("KEELGATE_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "sitekit.logs.JsonFormatter"},
        "text": {"()": "sitekit.logs.TextFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": KEELGATE_LOG_FORMAT}},
    "loggers": {
        "keelgate": {"handlers": ["console"], "level": _LOG_LEVEL, "propagate": False},
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # SQL with its parameters (session keys, password hashes) never reaches a log line.
        "django.db.backends": {"level": "INFO"},
    },
}

# -- Keelgate ---------------------------------------------------------------------------

KEELGATE_AGENTS = {
    "paper-trader": "runs.agents.paper_trader.build_agent",
}
"""Agent name -> dotted path of a factory returning a :class:`runs.agents.Agent`."""
if importlib.util.find_spec("langgraph") is not None:  # the LangGraph demo needs the langgraph extra
    KEELGATE_AGENTS["graph-trader"] = "runs.agents.graph_trader.build_agent"

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

KEELGATE_NOTIFICATION_CHANNELS = [
    "notifications.webhooks.WebhookChannel",
    "notifications.emails.EmailChannel",
    "notifications.slack.SlackChannel",
]
"""Dotted paths of the channels ``keelgate_notify`` runs each pass, in order (notifications/passes.py)."""

KEELGATE_AUDIT_ARGUMENTS = [
    t.strip() for t in os.environ.get("KEELGATE_AUDIT_ARGUMENTS", "").split(",") if t.strip()
]
"""Tenant slugs (comma-separated; ``*`` for every tenant) whose audit events carry a call's
arguments and impact line in the clear; every other tenant's name a call by its
``arguments_hash`` only. The chain cannot be edited afterwards, so this is the operator's
choice, made where the deployment is, and read with no query (tenants/auditing.py)."""

KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH = _env_bool("KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH", False)
"""Let ``POST /api/v1/approvals/{id}/approve`` (and the bulk approve) omit ``arguments_hash``,
approving whatever the call is by then. Off: the hash is required, as the console always
sends it, so an approval is bound to the arguments the approver saw. Read once as the API's
schema is built: the OpenAPI document says which."""

# -- Webhooks (notifications/webhooks/) -------------------------------------------------

KEELGATE_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("KEELGATE_WEBHOOK_TIMEOUT_SECONDS", "10"))
"""A whole request (connect, send, response) must finish in this time or it is cut off."""
_RETRY_SCHEDULE = os.environ.get("KEELGATE_WEBHOOK_RETRY_SCHEDULE", "5,300,1800,7200,18000,36000,36000")
KEELGATE_WEBHOOK_RETRY_SCHEDULE = [float(s) for s in _RETRY_SCHEDULE.split(",")]
"""Seconds before each retry (the Standard Webhooks schedule); when it runs out, the delivery fails."""
KEELGATE_SLACK_API_URL = os.environ.get("KEELGATE_SLACK_API_URL", "https://slack.com/api/")
"""Slack's Web API for the Slack channel (``slack_sdk``'s ``base_url``); tests point it at a fake."""
KEELGATE_SLACK_TIMEOUT_SECONDS = float(os.environ.get("KEELGATE_SLACK_TIMEOUT_SECONDS", "10"))
"""One call to Slack's Web API must answer in this time."""
_SLACK_RETRIES = os.environ.get("KEELGATE_SLACK_RETRY_SCHEDULE", "5,30,120,600,1800,3600")
KEELGATE_SLACK_RETRY_SCHEDULE = [float(s) for s in _SLACK_RETRIES.split(",")]
"""Seconds before each retry of a Slack post or update; when it runs out, the delivery fails."""
KEELGATE_SLACK_RESPONSE_URL_PREFIX = os.environ.get(
    "KEELGATE_SLACK_RESPONSE_URL_PREFIX", "https://hooks.slack.com/"
)
"""A click's ``response_url`` must start with this, or no reply is sent to it (Slack's own host)."""
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
KEELGATE_WEBHOOK_SECRET_GRACE_SECONDS = float(
    os.environ.get("KEELGATE_WEBHOOK_SECRET_GRACE_SECONDS", "86400")
)
"""After a secret is rotated, messages are signed with the old one too for this long (0: not at all)."""


def _signing_key() -> str:
    key = os.environ.get("KEELGATE_AUDIT_SIGNING_KEY", "")
    if key:
        return key
    if PRODUCTION:
        raise RuntimeError("KEELGATE_AUDIT_SIGNING_KEY must be set when KEELGATE_DEBUG=0")
    # Development and the local default: a key derived from the secret, stable across restarts.
    return base64.b64encode(hashlib.sha256(SECRET_KEY.encode()).digest()).decode()


KEELGATE_AUDIT_SIGNING_KEY = _signing_key()
"""Ed25519 private key (32 raw bytes, base64) that signs the audit log's checkpoints and
exported chain-head digests."""

KEELGATE_AUDIT_ORIGIN = os.environ.get(
    "KEELGATE_AUDIT_ORIGIN", urlsplit(KEELGATE_CONSOLE_URL).netloc + "/keelgate/{tenant}"
)
"""Each tenant's log origin, the first line of its checkpoints and its verifier key's name;
``{tenant}`` is replaced by the tenant's id. Default ``<console host>/keelgate/<tenant>``."""

KEELGATE_AUDIT_CHECKPOINT_INTERVAL = float(os.environ.get("KEELGATE_AUDIT_CHECKPOINT_INTERVAL", "0.5"))
"""Seconds between two signed checkpoints of one tenant while its events arrive."""

KEELGATE_AUDIT_WITNESSES = [
    w.strip()
    for w in os.environ.get("KEELGATE_AUDIT_WITNESSES", "").replace("\n", ",").split(",")
    if w.strip()
]
"""Witnesses each new checkpoint is sent to (C2SP ``tlog-witness`` ``add-checkpoint``), keeping
their cosignatures: comma-separated, each ``<submission URL> <witness vkey>``, the URL the
witness's submission prefix (Keelgate POSTs to ``<URL>/add-checkpoint``) and the vkey its
``cosignature/v1`` key, ``name+keyid+base64``. None by default. Each tenant's origin and the
site's verifier key must be known to the witness (``keelgate_sequencer`` sends; audit.witnesses)."""
KEELGATE_AUDIT_WITNESS_TIMEOUT_SECONDS = float(os.environ.get("KEELGATE_AUDIT_WITNESS_TIMEOUT_SECONDS", "10"))
"""Seconds one ``add-checkpoint`` request to a witness may take (to connect, and for each read)."""

# -- Email (notifications/emails/) ------------------------------------------------------

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
KEELGATE_EMAIL_LINK_HOURS = float(os.environ.get("KEELGATE_EMAIL_LINK_HOURS", "72"))
"""How long, at most, a link to decide an approval from an email works (once, for its recipient only);
it stops sooner when the approval is decided anywhere or passes its deadline."""

# -- REST API (keelgate_site/api.py) ----------------------------------------------------

KEELGATE_API_RATE_LIMIT = int(os.environ.get("KEELGATE_API_RATE_LIMIT", "600"))
"""Requests per API key per window (0 turns the limit off); over it, 429 with Retry-After."""
KEELGATE_API_RATE_WINDOW = int(os.environ.get("KEELGATE_API_RATE_WINDOW", "60"))
"""The rate limit's window, in seconds."""
KEELGATE_MCP_WAIT_SECONDS = float(os.environ.get("KEELGATE_MCP_WAIT_SECONDS", "60"))
"""How long an MCP call that became a run waits for its outcome (an approval, a worker) before it
answers that a person must decide and that calling again with the same arguments returns the outcome."""
KEELGATE_MCP_TOOLS_SECONDS = float(os.environ.get("KEELGATE_MCP_TOOLS_SECONDS", "30"))
"""How long a web process reuses an upstream's tool list before it lists the upstream's tools again."""
KEELGATE_MCP_TOOLS_PAGE = int(os.environ.get("KEELGATE_MCP_TOOLS_PAGE", "200"))
"""How many tools one page of /mcp/'s ``tools/list`` holds (the client follows ``nextCursor``)."""
KEELGATE_API_KEY_CACHE_SECONDS = float(os.environ.get("KEELGATE_API_KEY_CACHE_SECONDS", "1"))
"""A verified API key is remembered per process this long (0: off): a key revoked in another web process
works there at most this long (docs/performance.md#api-key-cache says why one second)."""
KEELGATE_INVITATION_HOURS = float(os.environ.get("KEELGATE_INVITATION_HOURS", "72"))
"""How long the link of an email invitation to a tenant works (once), in hours."""
KEELGATE_STANDING_APPROVAL_MAX_DAYS = float(os.environ.get("KEELGATE_STANDING_APPROVAL_MAX_DAYS", "30"))
"""The longest a standing approval rule ("approve, and the same from now on") may live, in days."""
KEELGATE_API_AUTH_FAILURE_LIMIT = int(os.environ.get("KEELGATE_API_AUTH_FAILURE_LIMIT", "20"))
"""Failed API authentications per client address per window; past it, 429 ``auth_rate_limited``."""
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

# -- Login throttling (django-axes; tenants/lockout.py) ---------------------------------

KEELGATE_LOGIN_FAILURE_LIMIT = int(os.environ.get("KEELGATE_LOGIN_FAILURE_LIMIT", "5"))
"""Wrong passwords for one username from one address before that pair is locked out."""
KEELGATE_LOGIN_COOLOFF_MINUTES = int(os.environ.get("KEELGATE_LOGIN_COOLOFF_MINUTES", "15"))
"""How long a lock-out lasts; an admin lifts one sooner with ``manage.py axes_reset_username``."""
AXES_FAILURE_LIMIT = KEELGATE_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=KEELGATE_LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # a stranger cannot lock an operator out
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "tenants.ratelimit.client_address"  # REMOTE_ADDR, never X-Forwarded-For
AXES_LOCKOUT_CALLABLE = "tenants.lockout.locked_out"
AXES_USERNAME_FORM_FIELD = "username"

# -- Metrics and traces (sitekit/metrics.py, keelgate_site/observability.py) -------------

KEELGATE_METRICS_TOKEN = os.environ.get("KEELGATE_METRICS_TOKEN", "")
"""Bearer token that ``/metrics`` requires; unset, ``/metrics`` is 404 (never public by default)."""
KEELGATE_METRICS_ALLOWED_NETWORKS = [
    n.strip() for n in os.environ.get("KEELGATE_METRICS_ALLOWED_NETWORKS", "").split(",") if n.strip()
]
"""If set, CIDR networks the scraper's address (REMOTE_ADDR) must be in, besides the token."""
KEELGATE_METRICS_DIR = os.environ.get("KEELGATE_METRICS_DIR") or str(VAR_DIR / "metrics")
"""Where every process on this host writes its counters (prometheus-client multiprocess mode);
empty it when all the site's processes are stopped, never while one runs."""
Path(KEELGATE_METRICS_DIR).mkdir(parents=True, exist_ok=True)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", KEELGATE_METRICS_DIR)
KEELGATE_METRICS_MAX_TENANTS = int(os.environ.get("KEELGATE_METRICS_MAX_TENANTS", "100"))
"""Per-tenant gauges for at most this many tenants (most waiting first); the rest add up as ``_other``."""
