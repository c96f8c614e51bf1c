"""Settings of the example project, read from the environment with django-environ.

``DATABASE_URL`` picks the database (default: the SQLite file ``demo.sqlite3`` next to
``manage.py``), e.g. ``postgres://postgres@127.0.0.1:5432/outbox_example``. ``EMAIL_URL``
picks the mail backend (default: ``memorymail://``, Django's locmem backend; use
``consolemail://`` to see the welcome emails a worker sends).
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="example-project-only-not-a-secret")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'demo.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # Web requests and worker threads write to the same file: wait for the write lock
            # rather than fail with "database is locked" at once.
            "timeout": 20,
            # Take the write lock when a transaction begins: a deferred transaction that reads
            # first and writes later fails at once when another connection wrote in between.
            "transaction_mode": "IMMEDIATE",
            # Readers don't block the writer (the worker sets this too; it persists in the file).
            "init_command": "PRAGMA journal_mode=WAL",
        }
    )

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Prepared statements: the server plans each of the worker's frequent queries once per
    # connection. Leave this out behind a pooler in transaction mode (PgBouncer < 1.21).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 5)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_outbox",
    "signups",
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
ROOT_URLCONF = "example.urls"
WSGI_APPLICATION = "example.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

vars().update(env.email_url("EMAIL_URL", default="memorymail://"))
DEFAULT_FROM_EMAIL = "welcome@example.com"

OUTBOX = {
    # Short backoff so the demo's retries happen within seconds: 0.5 s, 1 s, 2 s, ... up to 5 s.
    "RETRY": {"BASE_DELAY": 0.5, "MAX_DELAY": 5},
    "POLL_SECONDS": 0.5,
    # Where publish() sends events: kept in memory for the demo. A real project names its
    # broker here, e.g. {"BACKEND": "django_outbox.relay.brokers.rabbitmq.RabbitMQ",
    # "OPTIONS": {"url": "amqp://..."}} (docs/relay.md).
    "BROKERS": {"default": {"BACKEND": "django_outbox.relay.brokers.memory.InMemoryBroker"}},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "worker": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s", "datefmt": "%X"},
    },
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": "worker"},
    },
    "loggers": {
        # `manage.py demo` shows only warnings (retries, failures) unless run with -v 2.
        "django_outbox": {"handlers": ["stderr"], "level": env.str("OUTBOX_LOG_LEVEL", "INFO")},
    },
}
