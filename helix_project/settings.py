"""Django settings for Helix, read from the environment only.

Every deployment knob comes from an environment variable; README.md lists them. With none set,
the project runs in the embedded mode: a SQLite file in WAL mode, an in-process channel layer
and a filesystem Celery broker, all under ``var/``.
"""

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from agents_app import broker
from sessions_app.connections import check_quiet_connection

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# Where the embedded mode keeps its SQLite files and broker queue.
VAR_DIR = Path(env.str("HELIX_VAR_DIR", default=str(BASE_DIR / "var")))

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("Set SECRET_KEY (or DEBUG=true for a development run).")
    SECRET_KEY = "django-insecure-development-only-key-never-use-in-production"

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# Where a page that needs a signed-in user (the chat page) sends a visitor who is not: Helix's
# own sign-in page, which, unlike the admin's, lets in users who are not staff.
LOGIN_URL = env.str("LOGIN_URL", default="helix-login")
LOGIN_REDIRECT_URL = "helix-landing"

INSTALLED_APPS = [
    "helix_project.serving.DaphneConfig",  # Daphne's `runserver`, its server loaded lazily.
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "sessions_app",
    "streams_app",
    "agents_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "sessions_app.middleware.api_request_guard",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "helix_project.urls"
ASGI_APPLICATION = "helix_project.asgi.application"
WSGI_APPLICATION = None

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


def _database(url: str) -> dict:
    """Return the Django database settings for a DATABASE_URL."""
    database = env.db_url_config(url)
    if database["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets readers run beside the single writer; IMMEDIATE takes the write lock at
        # BEGIN, so concurrent writers queue on the busy timeout instead of failing to upgrade.
        database.setdefault("OPTIONS", {}).update(
            init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
            transaction_mode="IMMEDIATE",
            timeout=env.float("SQLITE_BUSY_TIMEOUT", default=30.0),
        )
        # A file, not :memory:, so tests share it across threads and processes as in production.
        database["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
        # SQLite creates the file but not its folder, which a fresh clone lacks.
        for name in (database["NAME"], database["TEST"]["NAME"]):
            if name != ":memory:":
                Path(name).parent.mkdir(parents=True, exist_ok=True)
    else:
        database["CONN_HEALTH_CHECKS"] = True
        # psycopg's own defaults, which Django turns off: bind parameters on the server and
        # prepare the statements a connection runs repeatedly, so PostgreSQL parses and plans
        # each hot statement once. Behind PgBouncer in transaction mode without
        # max_prepared_statements, set DATABASE_PREPARE_THRESHOLD=none.
        threshold = env.str("DATABASE_PREPARE_THRESHOLD", default="5")
        database.setdefault("OPTIONS", {}).update(
            server_side_binding=env.bool("DATABASE_SERVER_SIDE_BINDING", default=True),
            prepare_threshold=None if threshold.lower() in {"", "none"} else int(threshold),
        )
        # A psycopg pool per process bounds its connections, whatever the number of steps in
        # flight (each takes one only while it talks to the database) or of Daphne's per-call
        # threads. 0 turns it off for persistent connections (`CONN_MAX_AGE`) instead: needed
        # with a forking worker pool (`HELIX_WORKER_POOL=prefork`), whose children must not
        # inherit a pool.
        # Its check makes a round trip only for a connection whose socket says the server
        # ended it (`sessions_app.connections.check_quiet_connection`).
        if pool_size := env.int("DATABASE_POOL_MAX_SIZE", default=20):
            database["OPTIONS"]["pool"] = {
                "min_size": 1,
                "max_size": pool_size,
                "check": check_quiet_connection,
            }
        else:
            database["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0)
    return database


DATABASES = {
    "default": _database(env.str("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'helix.sqlite3'}")),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "static")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # `collectstatic` fills it; WhiteNoise wants it.
# WhiteNoise serves static files from the app directories in development and from STATIC_ROOT
# (filled by `collectstatic`) in production, so no separate web server is needed.
WHITENOISE_USE_FINDERS = DEBUG

# Security. TLS termination is deployment-specific, so redirects and HSTS are opt-in.
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
if env.bool("SECURE_PROXY_SSL_HEADER", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Load balancers probe health over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz)$"]

# Redis serves the channel layer and, unless CELERY_BROKER_URL says otherwise, the broker. The
# channel layer only rings readers of a stream; the database holds every chunk.
REDIS_URL = env.str("REDIS_URL", default="")
CHANNEL_LAYER_CAPACITY = env.int("CHANNEL_LAYER_CAPACITY", default=100)
REDIS_CHANNEL_LAYER = env.str("REDIS_CHANNEL_LAYER", default="pubsub")

if not REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": CHANNEL_LAYER_CAPACITY},
        }
    }
elif REDIS_CHANNEL_LAYER == "pubsub":
    # Pub/sub publishes a group message once per process, which fans it out to local readers.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL}]},
        }
    }
elif REDIS_CHANNEL_LAYER == "core":
    # The list-based layer blocks in BZPOPMIN for 5 s; redis-py 8 also defaults the socket
    # timeout to 5 s, which breaks that receive unless the socket is given longer.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 10}],
                "capacity": CHANNEL_LAYER_CAPACITY,
            },
        }
    }
else:
    raise ImproperlyConfigured("REDIS_CHANNEL_LAYER must be 'pubsub' or 'core'.")

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://")
# Redis brokers and RabbitMQ get different settings (agents_app/broker.py).
globals().update(
    {
        f"CELERY_{name.upper()}": value
        for name, value in broker.celery_settings(
            CELERY_BROKER_URL,
            visibility_timeout=env.int("CELERY_VISIBILITY_TIMEOUT", default=120),
            var_dir=VAR_DIR,
        ).items()
    }
)
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
CELERY_TASK_IGNORE_RESULT = True
# `celery beat` (which `serve` runs) runs the expired-session sweep this often; cron can run
# `manage.py cleanup_expired_sessions` instead (README).
CELERY_BEAT_SCHEDULE = {
    "cleanup-expired-sessions": {
        "task": "agents_app.tasks.cleanup_expired_sessions_task",
        "schedule": env.float("HELIX_CLEANUP_INTERVAL_SECONDS", default=900.0),
    },
    # The recovery sweep (DESIGN invariant 9); every worker also runs it once when it starts.
    "recover-stalled-runs": {
        "task": "agents_app.tasks.recover_stalled_runs_task",
        "schedule": env.float("HELIX_RECOVERY_INTERVAL_SECONDS", default=30.0),
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A step waits on its model nearly all its life: a worker runs many at once, each in a thread,
# rather than one per process. A thread is a few hundred kilobytes; its database connection
# comes from the pool above only while it talks to the database.
CELERY_WORKER_POOL = env.str("HELIX_WORKER_POOL", default="threads")
CELERY_WORKER_CONCURRENCY = env.int("HELIX_WORKER_CONCURRENCY", default=100)
# Celery closes database connections around every task unless this is set. Workers that keep
# theirs set it with CONN_MAX_AGE; `agents_app.tasks` still drops broken ones per task.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=0) or None

# Throttle counts live here: give every Daphne process the same cache in production
# (CACHE_URL=redis://host:6379/1), or each process counts on its own.
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://")}

REST_FRAMEWORK = {
    # Session auth enforces CSRF on unsafe methods; scripts send `Authorization: Token <key>`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "sessions_app.openapi.HelixAutoSchema",
    # DRF's JSON parser, refusing too-deep nesting and out-of-range numbers with a clean 400.
    "DEFAULT_PARSER_CLASSES": ["sessions_app.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "sessions_app.http.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Helix API",
    "DESCRIPTION": "Sessions, runs and streams of durable AI agents.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The docs page's assets come from drf-spectacular-sidecar: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "SessionStatusEnum": "sessions_app.stores.types.SessionStatus",
        "RunLaunchStatusEnum": ["started", "queued"],
    },
}

HELIX = {
    "SESSION_STORE": {
        "BACKEND": "sessions_app.stores.orm.ORMSessionStateStore",
        "OPTIONS": {},
    },
    "STREAM_MANAGER": {
        "BACKEND": "streams_app.backends.orm.ORMStreamManager",
        "OPTIONS": {
            "max_chunks": env.int("STREAM_MAX_CHUNKS", default=None),
            # Readers look at the database this often when no notice comes. The embedded
            # mode's in-process channel layer cannot carry notices from the Celery worker.
            "poll_interval": env.float("STREAM_POLL_INTERVAL", default=2.0 if REDIS_URL else 0.2),
        },
    },
    "USAGE_STORE": {"BACKEND": "sessions_app.usage.orm.ORMUsageStore", "OPTIONS": {}},
    "STREAM_RETENTION_DAYS": env.float("STREAM_RETENTION_DAYS", default=7),
    "SSE_HEARTBEAT_SECONDS": env.float("SSE_HEARTBEAT_SECONDS", default=30),
    # How long `POST /api/chat/{id}/interrupt` waits for the run to stop before answering 504.
    "INTERRUPT_OBSERVATION_SECONDS": env.float("INTERRUPT_OBSERVATION_SECONDS", default=5),
    # The largest API request body, in bytes (a run's files come base64 encoded in it).
    "MAX_REQUEST_BYTES": env.int("HELIX_MAX_REQUEST_BYTES", default=16 * 1024 * 1024),
    # Runs each user may start, resume or retry, e.g. "30/minute"; "" turns the limit off.
    "RUN_START_RATE": env.str("HELIX_RUN_START_RATE", default="60/minute") or None,
    # Starting a run while one runs: "reject" (409), "enqueue" (it begins when the running one
    # ends) or "interrupt" (enqueue, and interrupt the running one).
    "RUN_CONCURRENCY": env.str("HELIX_RUN_CONCURRENCY", default="reject"),
    "MAX_AGENT_STATE_BYTES": env.int("HELIX_MAX_AGENT_STATE_BYTES", default=1024 * 1024),
    # The bearer token that reads `/metrics` (and a worker's metrics port); staff need none.
    "METRICS_TOKEN": env.str("HELIX_METRICS_TOKEN", default=""),
    # Where a Celery worker serves its metrics; no port, no metrics server.
    "WORKER_METRICS_PORT": env.int("HELIX_WORKER_METRICS_PORT", default=None),
    "WORKER_METRICS_HOST": env.str("HELIX_WORKER_METRICS_HOST", default="0.0.0.0"),
    # How long each check of `/readyz` may take before it counts as failed.
    "READINESS_TIMEOUT_SECONDS": env.float("HELIX_READINESS_TIMEOUT_SECONDS", default=2),
    # Who may frame the chat page: CSP `frame-ancestors` sources, space-separated.
    "CHAT_FRAME_ANCESTORS": env.str("HELIX_CHAT_FRAME_ANCESTORS", default="'self'").split(),
    # Modules that register agents when imported.
    "AGENTS": env.list("HELIX_AGENTS", default=["agents_app.demo"]),
    # The model adapter; an agent's own `llm` settings are merged over OPTIONS.
    "LLM": {
        "BACKEND": env.str("LLM_BACKEND", default="agents_app.llm.scripted.ScriptedAdapter"),
        "OPTIONS": {
            name: value
            for name, value in (
                ("base_url", env.str("LLM_BASE_URL", default=None)),
                ("api_key", env.str("LLM_API_KEY", default=None)),
                ("model", env.str("LLM_MODEL", default=None)),
            )
            if value is not None
        },
    },
    # A step holds its session's lease this long without renewal; it renews every third.
    "STEP_LEASE_SECONDS": env.float("STEP_LEASE_SECONDS", default=30),
    # A task runs its run's steps one after another this long, then hands the next to the
    # broker, so runs take turns on the workers; 0 runs one step per task.
    "STEP_TIME_SLICE_SECONDS": env.float("STEP_TIME_SLICE_SECONDS", default=2),
    "INTERRUPT_POLL_SECONDS": env.float("INTERRUPT_POLL_SECONDS", default=0.5),
    "LLM_MAX_RETRIES": env.int("LLM_MAX_RETRIES", default=3),
    "LLM_RETRY_BACKOFF_SECONDS": env.float("LLM_RETRY_BACKOFF_SECONDS", default=1),
    # A step that raises (a bug, the database away) is retried this often, then its run fails.
    "STEP_ERROR_RETRIES": env.int("STEP_ERROR_RETRIES", default=3),
    "STEP_ERROR_BACKOFF_SECONDS": env.float("STEP_ERROR_BACKOFF_SECONDS", default=1),
    # A step whose attempts die (a tool that crashes its worker) fails its run after this many
    # in a row; raising attempts count too, so keep it above STEP_ERROR_RETRIES.
    "STEP_MAX_ABANDONED": env.int("STEP_MAX_ABANDONED", default=5),
    # A running run nothing moved this long (no lease held, no step committed) is recovered:
    # the sweep enqueues its next step again. One recovered this often in a row at the same
    # step fails, with failure_reason "stalled".
    "STALLED_RUN_SECONDS": env.float("HELIX_STALLED_RUN_SECONDS", default=120),
    "RUN_MAX_RECOVERIES": env.int("HELIX_RUN_MAX_RECOVERIES", default=3),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # The HTTP clients of the model and MCP SDKs log each request, its URL whole, at INFO: a
    # line per step, and a token in a URL's query would land in the logs.
    "loggers": {
        name: {"level": env.str("HTTP_CLIENT_LOG_LEVEL", default="WARNING")}
        for name in ("httpx", "httpx2")
    },
}
