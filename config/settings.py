"""Settings, read from the environment; the defaults are the embedded mode (SQLite, in-memory channel layer)."""

import os
import secrets
import sys
from pathlib import Path

import dj_database_url

from .env import env_bool, env_choice, env_int, env_list, env_secret

# Django sets TZ for its own process; terminals get the zone the service was started with.
ORIGINAL_TZ = os.environ.get("TZ")
BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.getenv("TERMINALS_DATA_DIR", BASE_DIR / "var"))
VERSION = "1.0.0"


def _persistent_secret_key() -> str:
    """Returns SECRET_KEY from the environment, or one generated once and kept in the data folder."""
    configured = env_secret("SECRET_KEY")
    if configured:
        return configured
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)  # private from the start, not from ready()
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as key_file:
            key_file.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _persistent_secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
# Browser origins, besides the service's own (scheme, host and port as the request reached it), whose pages may act
# with a user's login: the dashboard's forms (Django's CSRF check) and the cookie-authenticated WebSocket
# (terminals/origins.py). Behind a proxy that terminates TLS, name the https:// origin browsers use.
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
REDIS_URL = os.getenv("REDIS_URL", "")
# Connections one process may open to Redis (each channel-layer operation in flight holds one).
REDIS_MAX_CONNECTIONS = env_int("TERMINALS_REDIS_MAX_CONNECTIONS", 1000, minimum=4)

INSTALLED_APPS = [
    "daphne",
    # Before django.contrib.auth, so that its changepassword command (which audits the change) is the one run.
    "terminals",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served by the service: /api/docs/ works offline
    "channels",
]

MIDDLEWARE = [
    "terminals.metrics.RequestMetrics",  # first: it times everything after it
    "corsheaders.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "terminals" / "dashboard" / "templates"],
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


def _database(url: str) -> dict:
    database = dj_database_url.parse(url, conn_max_age=600, conn_health_checks=True)
    if database["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets readers run beside the writer; IMMEDIATE takes the write lock
        # up front, so concurrent writers wait (busy timeout) instead of failing
        # with "database is locked" half-way through a transaction.
        database["OPTIONS"] = {
            # How long a writer waits for the lock before "database is locked" (an audit write then answers 503).
            "timeout": env_int("TERMINALS_DB_BUSY_TIMEOUT_MS", 30_000) / 1000,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return database


DATABASES = {"default": _database(os.getenv("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'terminals.sqlite3'}")}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    # DRF's compat module imports django.contrib.postgres whenever psycopg is installed, and with it psycopg:
    # 9 MB of every process's memory that SQLite never uses. A None entry makes that optional import fail.
    sys.modules.setdefault("django.contrib.postgres.fields", None)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    CHANNEL_LAYERS = {
        "default": {
            # channels_redis's layer, with one receiver per process that no cancelled receive() can take a
            # message from (terminals/plumbing/channel_layer.py).
            "BACKEND": "terminals.plumbing.channel_layer.RedisChannelLayer",
            # The read timeout must outlast channels_redis's 5 s blocking pop; connecting fails fast. A command
            # on a pooled connection that Redis closed (it restarted) is tried once more, on a new connection.
            "CONFIG": {
                # redis-py's pool refuses (MaxConnectionsError) rather than waits beyond max_connections, 100
                # by default: a web process with more operations in flight than that would answer 503.
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15, "socket_connect_timeout": 2,
                           "retry": Retry(NoBackoff(), 1, (RedisConnectionError,)),
                           "max_connections": REDIS_MAX_CONNECTIONS}],
                "capacity": 1000,
                "expiry": 30,
            },
        }
    }
    # Throttle counts only: short timeouts, so a frozen Redis delays a request by a second at most (throttling.py
    # then lets requests through uncounted for a while).
    CACHES = {"default": {"BACKEND": "terminals.plumbing.shared_cache.SharedRedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": {"socket_timeout": 1, "socket_connect_timeout": 1}}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}}
    CACHES = {"default": {"BACKEND": "terminals.plumbing.shared_cache.LocalCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "terminals" / "dashboard" / "static"]  # the dashboard's own, with xterm.js
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:terminals"
STATIC_ROOT = DATA_DIR / "static"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["terminals.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["terminals.throttling.ApiKeyRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "api": os.getenv("TERMINALS_THROTTLE_RATE", "1200/min"),
        "create": os.getenv("TERMINALS_CREATE_THROTTLE_RATE", "60/min"),
    },
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["terminals.api.parsers.KeepableJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "terminals.api.negotiation.JsonWhateverAccept",
    "EXCEPTION_HANDLER": "terminals.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "terminals.api.schema.DescribedAutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "NUM_PROXIES": 0,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Persistent terminal service",
    "DESCRIPTION": "Real PTY shell sessions over REST: create, type, read in bounded slices, stop.",
    "VERSION": VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # drf-spectacular's own, from the module that loads the views' annotations (terminals/openapi.py)
    "DEFAULT_GENERATOR_CLASS": "terminals.api.schema.SchemaGenerator",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "TerminalStatusEnum": "terminals.models.TerminalSession.Status",
        "CommandStatusEnum": ["running", "completed"],
        "HealthStatusEnum": ["healthy", "degraded"],
    },
}

_cors_origin = os.getenv("CORS_ORIGIN", "*")
CORS_ALLOW_ALL_ORIGINS = _cors_origin.strip() == "*"
CORS_ALLOWED_ORIGINS = [] if CORS_ALLOW_ALL_ORIGINS else env_list("CORS_ORIGIN", [])
CORS_ALLOW_HEADERS = ["accept", "authorization", "content-type", "x-api-key", "last-event-id"]
CORS_URLS_REGEX = r"^/api/.*$"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        # TERMINALS_LOG_FORMAT=json: one JSON object per line (time, level, logger, message, and exc_info).
        "json": {"()": "pythonjsonlogger.json.JsonFormatter", "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
                 "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"}},
    },
    # An API key sent in the wrong place (a URL, say) is masked in every log line.
    "filters": {
        "secrets": {"()": "terminals.redaction.RedactSecrets"},
        # Each refused request is logged once, by the service, on terminals.refusals (INFO): see log_filters.py.
        "server_errors_only": {"()": "terminals.plumbing.log_filters.ServerErrorsOnly"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["secrets"],
                             "formatter": env_choice("TERMINALS_LOG_FORMAT", "plain", ("plain", "json"))}},
    "root": {"handlers": ["console"], "level": os.getenv("LOG_LEVEL", "INFO").upper()},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        "django.request": {"filters": ["server_errors_only"]},
        "terminals.refusals": {"level": os.getenv("TERMINALS_REFUSALS_LOG_LEVEL", "INFO").upper()},
    },
}
# `manage.py serve` writes daphne's access log (one line per request, with the URL, keys masked) to stdout.
ACCESS_LOG = env_bool("TERMINALS_ACCESS_LOG", False)

# The service's own settings, all TERMINALS_*; the REST contract's names (MAX_BUFFER_SIZE, SESSION_TIMEOUT) keep
# working as aliases. HOST and PORT keep their plain names, which every server tool uses.
HOST = os.getenv("HOST", "127.0.0.1")
PORT = env_int("PORT", 3001)
TERMINALS = {
    "MAX_BUFFER_LINES": env_int("TERMINALS_MAX_BUFFER_LINES", 10_000, minimum=1, aliases=("MAX_BUFFER_SIZE",)),
    "MAX_BUFFER_BYTES": env_int("TERMINALS_MAX_BUFFER_BYTES", 4 << 20, minimum=1024),
    "SESSION_TIMEOUT_MS": env_int("TERMINALS_SESSION_TIMEOUT_MS", 24 * 3600 * 1000, minimum=1,
                                  aliases=("SESSION_TIMEOUT",)),
    "SWEEP_INTERVAL_MS": env_int("TERMINALS_SWEEP_INTERVAL_MS", 5 * 60 * 1000, minimum=100),
    "ALLOWED_SHELLS": env_list("TERMINALS_ALLOWED_SHELLS", []),  # empty: the shells in /etc/shells
    "DEFAULT_SHELL": os.getenv("TERMINALS_DEFAULT_SHELL", ""),  # empty: $SHELL if allowed, else bash, else sh
    "CWD_ROOT": os.getenv("TERMINALS_CWD_ROOT", ""),
    "DEFAULT_CWD": os.getenv("TERMINALS_DEFAULT_CWD", ""),  # empty: CWD_ROOT, else the user's home or workspace
    "MAX_INPUT_BYTES": env_int("TERMINALS_MAX_INPUT_BYTES", 64 * 1024, minimum=1),
    "MAX_PENDING_INPUT_BYTES": env_int("TERMINALS_MAX_PENDING_INPUT_BYTES", 1 << 20, minimum=1024),
    "MAX_ENV_VARS": env_int("TERMINALS_MAX_ENV_VARS", 100),
    "MAX_ENV_VALUE_BYTES": env_int("TERMINALS_MAX_ENV_VALUE_BYTES", 8192, minimum=1),
    "MAX_COLS": env_int("TERMINALS_MAX_COLS", 1000, minimum=1),
    "MAX_ROWS": env_int("TERMINALS_MAX_ROWS", 500, minimum=1),
    "MAX_PER_USER": env_int("TERMINALS_MAX_PER_USER", 100, minimum=1),
    "MAX_TOTAL": env_int("TERMINALS_MAX_TOTAL", 1000, minimum=1),
    "MAX_OUTPUT_LINES": env_int("TERMINALS_MAX_OUTPUT_LINES", 10_000, minimum=1),
    "KILL_GRACE_MS": env_int("TERMINALS_KILL_GRACE_MS", 3000),
    # The longest a request may wait: for a command (timeoutMs) or for a process to exit.
    "MAX_WAIT_MS": env_int("TERMINALS_MAX_WAIT_MS", 10 * 60 * 1000, minimum=1),
    # The longest one MCP tool call may wait (terminals/mcp/calls.py, wait_ms): most MCP clients give up on a call
    # long before MAX_WAIT_MS; past it a tool answers as for any timeout, with a handle to wait on.
    "MCP_MAX_WAIT_MS": env_int("TERMINALS_MCP_MAX_WAIT_MS", 60 * 1000, minimum=1),
    "MAX_READ_BYTES": env_int("TERMINALS_MAX_READ_BYTES", 1 << 20, minimum=1),
    "WORKER_TIMEOUT_MS": env_int("TERMINALS_WORKER_TIMEOUT_MS", 5000, minimum=100),
    "HEARTBEAT_INTERVAL_MS": env_int("TERMINALS_HEARTBEAT_INTERVAL_MS", 5000, minimum=100),
    # Live connections (WebSockets and follow streams) one user may hold open at once, in each web process.
    "MAX_LIVE_CONNECTIONS_PER_USER": env_int("TERMINALS_MAX_LIVE_CONNECTIONS_PER_USER", 200, minimum=1),
    # Waits (for output, a command or an exit, longer than access.CHECK_SECONDS) one user may have in progress at
    # once, in each web process: each holds one of the process's REQUEST_THREADS while it waits.
    "MAX_WAITS_PER_USER": env_int("TERMINALS_MAX_WAITS_PER_USER", 16, minimum=1),
    # Requests a web process runs at once, each on a thread with its own database connection (so this bounds the
    # process's connections); a request that finds them all busy waits up to REQUEST_QUEUE_MS for one, then
    # answers 503 SERVER_BUSY with Retry-After.
    "REQUEST_THREADS": env_int("TERMINALS_REQUEST_THREADS", 64, minimum=2),
    "REQUEST_QUEUE_MS": env_int("TERMINALS_REQUEST_QUEUE_MS", 10_000, minimum=0),
    # How long a follow stream (SSE) stays silent before a keepalive comment, so proxies keep it open.
    "SSE_KEEPALIVE_MS": env_int("TERMINALS_SSE_KEEPALIVE_MS", 15000, minimum=100),
    # host:port where this process also serves /metrics without authentication; empty: only GET /api/metrics.
    "METRICS_BIND": os.getenv("TERMINALS_METRICS_BIND", ""),
    # Who terminals run as (terminals/environment.py, run_as_policy): unset = "per-user" when the service runs
    # as root, else "service"; "per-user" = an account per Django user, made on first use; "service" (or
    # empty, the old spelling) = the service's own account, users not separated; any other name = that account.
    "RUN_AS": None if os.getenv("TERMINALS_RUN_AS") is None else os.environ["TERMINALS_RUN_AS"].strip(),
    "RUN_AS_PREFIX": os.getenv("TERMINALS_RUN_AS_PREFIX", "term-"),
    # Where each user's home (per-user) or workspace (service) is made; empty: /home as root, else
    # ~/terminal-homes of the service's account.
    "HOMES": os.getenv("TERMINALS_HOMES", ""),
    # Where a root worker keeps execute-only copies of the shells other accounts run (non-dumpable shells).
    "SEALED_SHELL_DIR": os.getenv("TERMINALS_SEALED_SHELL_DIR", "/var/lib/terminals/shells"),
    # Per-terminal limits (0 = none). Processes, memory and CPU are enforced by cgroups where writable.
    "LIMIT_PROCESSES": env_int("TERMINALS_LIMIT_PROCESSES", 512, minimum=0),
    "LIMIT_OPEN_FILES": env_int("TERMINALS_LIMIT_OPEN_FILES", 4096, minimum=0),
    "LIMIT_MEMORY_MB": env_int("TERMINALS_LIMIT_MEMORY_MB", 2048, minimum=0),
    "LIMIT_CPU_CORES": float(os.getenv("TERMINALS_LIMIT_CPU_CORES", "0") or 0),
    "CGROUPS": env_bool("TERMINALS_CGROUPS", True),
    # Whether `manage.py terminal_worker` runs under a keeper (terminals/runtime/keeper.py), so that its terminals
    # outlive it: SIGHUP restarts it in place, and a worker killed is started again and takes them back.
    "KEEPER": env_bool("TERMINALS_KEEPER", False),
    # How long a worker told to hand over (a reload) may take to exit before its keeper kills it.
    "KEEPER_HANDOVER_SECONDS": env_int("TERMINALS_KEEPER_HANDOVER_SECONDS", 30, minimum=1),
    # Live keys (WebSocket input): "batched" sends printable keys at once and commits their audit rows together
    # within 250 ms, before any key that can run anything goes out; "strict" commits a row before every frame
    # (terminals/keystrokes.py, SECURITY.md).
    "KEY_AUDIT": env_choice("TERMINALS_KEY_AUDIT", "batched", ("batched", "strict")),
    # Recording what terminals show (docs/recording.md): every terminal, or those of the users named, besides the
    # ones created with "record": true. Files go to RECORDINGS_DIR on the host of the worker that writes them.
    "RECORD_ALL": env_bool("TERMINALS_RECORD_ALL", False),
    "RECORD_USERS": env_list("TERMINALS_RECORD_USERS", []),
    "RECORD_INPUT": env_bool("TERMINALS_RECORD_INPUT", False),  # what was typed too, passwords at prompts included
    "RECORDINGS_DIR": os.getenv("TERMINALS_RECORDINGS_DIR", str(DATA_DIR / "recordings")),
    "RECORDING_MAX_MB": env_int("TERMINALS_RECORDING_MAX_MB", 100, minimum=0),  # 0: no cap
    "RECORDING_RETENTION_DAYS": env_int("TERMINALS_RECORDING_RETENTION_DAYS", 90, minimum=0),  # 0: kept for ever
    "RECORDING_FLUSH_MS": env_int("TERMINALS_RECORDING_FLUSH_MS", 1000, minimum=10),  # a crash loses at most this much
    # Embedded mode hosts terminals inside the web process; split mode (REDIS_URL) in terminal_worker processes.
    "EMBEDDED_WORKER": env_bool("TERMINALS_EMBEDDED_WORKER", not REDIS_URL),
}
