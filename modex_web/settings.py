"""Modex settings. Every value that varies by deployment comes from the environment (README)."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from modex_web.env import (
    database_config,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_path,
    env_proxy_ssl_header,
    env_str,
    private_workspace,
    secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", False)
MODEX_WORKSPACE = env_path("MODEX_WORKSPACE", BASE_DIR / "workspace", base=BASE_DIR)
private_workspace(MODEX_WORKSPACE)
MODEX_SCOPES_FILE = env_path("MODEX_SCOPES_FILE", BASE_DIR / "config" / "scopes" / "bot.yml", base=BASE_DIR)
# Recall benchmark results (manage.py memory_eval writes new runs to runs/; /evaluation/ shows them).
MODEX_EVAL_RESULTS = env_path("MODEX_EVAL_RESULTS", BASE_DIR / "benchmarks" / "results", base=BASE_DIR)

SECRET_KEY = secret_key(debug=DEBUG, workspace=MODEX_WORKSPACE)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",  # serves the API docs' Swagger UI from /static/ (else from a CDN the CSP refuses)
    "channels",
    "django_tasks_db",
    "memory",
    "agents",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # /static/ from STATIC_ROOT (daphne serves none)
    "modex_web.security.NoStoreMiddleware",  # Cache-Control: no-store on every rendered response
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "modex_web.urls"
ASGI_APPLICATION = "modex_web.asgi.application"

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
                "django.template.context_processors.csp",
            ],
        },
    },
]

DATABASES = {"default": database_config(url=env_str("DATABASE_URL"), workspace=MODEX_WORKSPACE)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    try:
        import channels_redis  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the install
        raise ImproperlyConfigured("REDIS_URL is set but channels-redis is not installed (pip install channels-redis).")
    # socket_timeout: redis-py 8 reads with a 5 s timeout by default, exactly as long as the
    # layer's blocking receive (BZPOPMIN, 5 s) waits on an idle channel, so an idle WebSocket
    # died with "Timeout reading from redis" after about 5 s. Reads must outlast that wait.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30, "socket_connect_timeout": 5}],
                "capacity": env_int("MODEX_CHANNEL_CAPACITY", 1000, minimum=100),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Background tasks (Dream Engine consolidation, experience review, archiving, the cleanup ahead
# of need): django.tasks. "db" queues them in the database for `manage.py db_worker` (`make run`
# starts them); "immediate" runs them inline (no worker; retries wait for the next trigger);
# "dummy" only records them. Two queues: "ahead" holds the cleanups ahead of need, which the next
# turn waits on (`make run` gives them a worker of its own, so they never wait for a task that is
# itself waiting for chat), "default" the rest; `db_worker --queue-name '*'` runs both.
TASK_BACKENDS = {
    "db": "django_tasks_db.DatabaseBackend",
    "immediate": "django.tasks.backends.immediate.ImmediateBackend",
    "dummy": "django.tasks.backends.dummy.DummyBackend",
}
MODEX_TASKS_BACKEND = (env_str("MODEX_TASKS_BACKEND", "db") or "db").strip().lower()
if MODEX_TASKS_BACKEND not in TASK_BACKENDS:
    raise ImproperlyConfigured(
        f"MODEX_TASKS_BACKEND={MODEX_TASKS_BACKEND!r} is not one of {', '.join(TASK_BACKENDS)}."
    )
TASK_QUEUES = ["default", "ahead"]
TASKS = {"default": {"BACKEND": TASK_BACKENDS[MODEX_TASKS_BACKEND], "QUEUES": TASK_QUEUES}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env_path("DJANGO_STATIC_ROOT", MODEX_WORKSPACE / "static", base=BASE_DIR)
# `make serve` runs collectstatic with DJANGO_STATIC_MANIFEST=true: content-hashed names that
# WhiteNoise serves with a year-long cache. Off, names are plain (nothing needs collectstatic).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if env_bool("DJANGO_STATIC_MANIFEST", False)
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# HTTPS only, by default whenever DEBUG is off (README "Production"): redirect to HTTPS, HSTS,
# cookies sent over HTTPS only. Behind a proxy that terminates TLS, set
# DJANGO_SECURE_PROXY_SSL_HEADER (e.g. "X-Forwarded-Proto: https") so Django sees the request
# was secure; if the proxy redirects to HTTPS itself, DJANGO_SECURE_SSL_REDIRECT=false.
# DJANGO_SECURE=false serves plain HTTP (a loopback trial, a load test).
MODEX_SECURE = env_bool("DJANGO_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", MODEX_SECURE)
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000 if MODEX_SECURE else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", MODEX_SECURE)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", MODEX_SECURE)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", MODEX_SECURE)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", MODEX_SECURE)

# Content Security Policy (Django's own middleware), in every mode so development sees what
# production refuses. Scripts and styles come from /static/ only: no inline script, no inline
# style attribute (the meter's widths are set by static/js/chat.js from data attributes). The
# nonce is there for Django's own pages that carry one (e.g. the CSRF failure page).
# 'self' in connect-src covers the chat's same-origin ws:// / wss:// socket.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],  # the admin's and Swagger UI's icons are data: URLs in CSS
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# Memory system defaults; the declaration (config/scopes/bot.yml) can override per agent.
MODEX_PERSISTENCE_BACKEND = env_str("MODEX_PERSISTENCE_BACKEND")  # None: take bot.yml's choice
# Leases (memory/locks.py) keep one turn per conversation and one cleanup per session running,
# across every worker sharing the database. A running holder renews its lease; these bound how
# long a worker that died mid-turn or mid-cleanup blocks the next one.
MODEX_TURN_LEASE_TTL = env_float("MODEX_TURN_LEASE_TTL", 300.0, minimum=1.0)
MODEX_CLEANUP_LEASE_TTL = env_float("MODEX_CLEANUP_LEASE_TTL", 600.0, minimum=1.0)
# Runtime hook installers (agents/runtime/hooks.py), each "module.function(hooks, agent, runtime)":
# session cleanup, the cleanup ahead of need (in the pause after a turn, by the task worker), the
# experience review (agents with the supplement), the Dream Engine's binding, archiving.
# Drop one to switch that capability off for every agent; add your own to extend the loop.
MODEX_RUNTIME_HOOKS = env_list(
    "MODEX_RUNTIME_HOOKS",
    [
        "agents.runtime.cleanup.install",
        "agents.runtime.cleanup.install_ahead",
        "agents.experience.hook.install",
        "agents.tasks.install_long_term_session",
        "agents.archiving.install",
    ],
)

# Sign-in throttle (agents/personal/login.py): failures per account name and per client address
# within the window, and how long a lock lasts.
MODEX_LOGIN_MAX_FAILURES = env_int("MODEX_LOGIN_MAX_FAILURES", 5, minimum=1)
MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS", 30, minimum=1)
MODEX_LOGIN_WINDOW = env_int("MODEX_LOGIN_WINDOW", 900, minimum=1)
MODEX_LOGIN_LOCKOUT = env_int("MODEX_LOGIN_LOCKOUT", 900, minimum=1)
# How many reverse proxies in front of the workers append to X-Forwarded-For: the client address
# is the entry that many places from the right. 0: no proxy, the socket's own peer address.
MODEX_TRUSTED_PROXIES = env_int("MODEX_TRUSTED_PROXIES", 0, minimum=0)

# Chat sockets (agents/chat/sockets.py), per user and worker process: open sockets, turns
# running at once, and re-syncs of a conversation per minute (the page sends one per connect).
MODEX_MAX_SOCKETS_PER_USER = env_int("MODEX_MAX_SOCKETS_PER_USER", 20, minimum=1)
MODEX_MAX_TURNS_PER_USER = env_int("MODEX_MAX_TURNS_PER_USER", 3, minimum=1)
MODEX_SYNCS_PER_MINUTE = env_int("MODEX_SYNCS_PER_MINUTE", 30, minimum=1)

# Personal API tokens expire this many days after they are made (0: never).
MODEX_TOKEN_TTL_DAYS = env_int("MODEX_TOKEN_TTL_DAYS", 90, minimum=0)

# Background tasks: the lease a consolidation or review holds, and how long a task may stay
# "running" before the reaper (manage.py reap_tasks) takes its worker for dead and runs it again.
MODEX_TASK_LEASE_TTL = env_float("MODEX_TASK_LEASE_TTL", 600.0, minimum=1.0)
MODEX_TASK_STALE_AFTER = env_float("MODEX_TASK_STALE_AFTER", MODEX_TASK_LEASE_TTL * 1.5, minimum=1.0)

# Archive retrieval (memory/retrieval, memory/archiving): the embedded offline embedding model or
# none (OPENAI_EMBEDDING_MODEL, read by agents/llm/embeddings.py, takes the endpoint's instead),
# how close a message found by meaning alone must be, how many archived messages the search
# keeps in memory across users, and how long a conversation stays quiet before it is archived.
MODEX_EMBEDDINGS = (env_str("MODEX_EMBEDDINGS", "offline") or "offline").strip().lower()
if MODEX_EMBEDDINGS not in ("offline", "off"):
    raise ImproperlyConfigured(f"MODEX_EMBEDDINGS={MODEX_EMBEDDINGS!r} must be 'offline' or 'off'.")
MODEX_RECALL_MIN_SIMILARITY = env_float("MODEX_RECALL_MIN_SIMILARITY", 0.25, minimum=-1.0)
MODEX_RECALL_CACHE_MESSAGES = env_int("MODEX_RECALL_CACHE_MESSAGES", 300_000, minimum=1000)
MODEX_ARCHIVE_IDLE_MINUTES = env_float("MODEX_ARCHIVE_IDLE_MINUTES", 30.0, minimum=0.0)
# Where recalled messages are sent: "system" (in the archive section, the default) or "message"
# (at the head of the latest user message, so the system message stays the same from turn to turn
# and a prefix-caching local server does not read the whole conversation again each turn).
MODEX_RECALL_PLACEMENT = (env_str("MODEX_RECALL_PLACEMENT", "system") or "system").strip().lower()
if MODEX_RECALL_PLACEMENT not in ("system", "message"):
    raise ImproperlyConfigured(f"MODEX_RECALL_PLACEMENT={MODEX_RECALL_PLACEMENT!r} must be 'system' or 'message'.")
# Model calls (agents/llm/settings.py ModelCaps, agents/llm/gate.py): a completion-token cap per
# caller (the chat reply's 0 means the agent's reply reserve: an eighth of the window, at most
# 1024), and the gate that keeps background memory work from delaying a user's turn.
MODEX_MAX_TOKENS_REPLY = env_int("MODEX_MAX_TOKENS_REPLY", 0, minimum=0)
MODEX_MAX_TOKENS_SUMMARY = env_int("MODEX_MAX_TOKENS_SUMMARY", 1024, minimum=16)
MODEX_MAX_TOKENS_DREAM = env_int("MODEX_MAX_TOKENS_DREAM", 1024, minimum=16)
MODEX_MAX_TOKENS_REVIEW = env_int("MODEX_MAX_TOKENS_REVIEW", 512, minimum=16)
MODEX_MODEL_CONCURRENCY = env_int("MODEX_MODEL_CONCURRENCY", 0, minimum=0)  # 0: auto
MODEX_BACKGROUND_MAX_WAIT = env_float("MODEX_BACKGROUND_MAX_WAIT", 300.0, minimum=1.0)
MODEX_BACKGROUND_AFTER_TURN = env_float("MODEX_BACKGROUND_AFTER_TURN", 5.0, minimum=0.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "modex": {"handlers": ["console"], "level": env_str("MODEX_LOG_LEVEL", "INFO")},
        "memory": {"handlers": ["console"], "level": env_str("MODEX_LOG_LEVEL", "INFO")},
        "agents": {"handlers": ["console"], "level": env_str("MODEX_LOG_LEVEL", "INFO")},
    },
}
