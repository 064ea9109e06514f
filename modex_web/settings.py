"""Modex settings. Every value that varies by deployment comes from the environment (README)."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from modex_web.env import database_config, env_bool, env_int, env_list, env_path, env_str, secret_key

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", False)
MODEX_WORKSPACE = env_path("MODEX_WORKSPACE", BASE_DIR / "workspace", base=BASE_DIR)
MODEX_WORKSPACE.mkdir(parents=True, exist_ok=True)
MODEX_SCOPES_FILE = env_path("MODEX_SCOPES_FILE", BASE_DIR / "config" / "scopes" / "bot.yml", base=BASE_DIR)

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
    "channels",
    "django_tasks_db",
    "memory",
    "agents",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "capacity": env_int("MODEX_CHANNEL_CAPACITY", 1000, minimum=100)},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Background tasks (Dream Engine consolidation, experience review): django.tasks. "db" queues
# them in the database for `manage.py db_worker` (`make run` starts one); "immediate" runs them
# inline (no worker; retries wait for the next trigger); "dummy" only records them.
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
TASKS = {"default": {"BACKEND": TASK_BACKENDS[MODEX_TASKS_BACKEND]}}

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
STATIC_ROOT = MODEX_WORKSPACE / "static"

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# Memory system defaults; the declaration (config/scopes/bot.yml) can override per agent.
MODEX_PERSISTENCE_BACKEND = env_str("MODEX_PERSISTENCE_BACKEND")  # None: take bot.yml's choice

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
