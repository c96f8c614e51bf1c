"""Settings for the test suite. DATABASE_URL picks the database (default: a SQLite file)."""

import os
from pathlib import Path
from typing import TYPE_CHECKING

import django
import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

DATABASES = {
    "default": env.db_url(
        "DATABASE_URL",
        default=f"sqlite:///{BASE_DIR.parent / '.test-databases' / 'outbox.sqlite3'}",
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory: worker threads and worker processes must see the same database.
    name = Path(DATABASES["default"]["NAME"])
    name.parent.mkdir(parents=True, exist_ok=True)
    # One file per Django version: the legs of make test never share a database file (nor
    # its -wal and -shm files), whatever a leg's worker processes leave behind.
    DATABASES["default"]["TEST"] = {
        "NAME": str(name.with_name(f"test-django{django.VERSION[0]}-{name.name}"))
    }
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
    # The suite begins SQLite transactions deferred, Django's default, on purpose: its tests
    # cover what the worker does then (an atomic job run again within its attempt). The
    # warning that the quick start's IMMEDIATE avoids (django_outbox.W052) is tested on its own.
    SILENCED_SYSTEM_CHECKS = ["django_outbox.W052"]
# Worker processes started by the tests use the test database the suite created.
if os.environ.get("OUTBOX_TEST_DATABASE_NAME"):
    DATABASES["default"]["NAME"] = os.environ["OUTBOX_TEST_DATABASE_NAME"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # The admin's CSS and scripts, for the browser tests' live server.
    "django.contrib.staticfiles",
    "django_outbox",
    "tests.testapp",
    # The models of the docs' examples (tests/docs/test_docs.py runs them).
    "tests.docsapp",
    # bench/outbox_bench: the benchmark, whose command the suite checks runs (not how fast).
    "outbox_bench",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
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
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The docs' examples send email (the test environment swaps in the locmem backend). Django 6.1
# warns when MAILERS is unset; older versions ignore it.
MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}

OUTBOX = {
    # Short, so tests of lease expiry and retries finish quickly.
    "LEASE_SECONDS": float(os.environ.get("OUTBOX_TEST_LEASE_SECONDS", 4)),
    "HEARTBEAT_SECONDS": float(os.environ.get("OUTBOX_TEST_HEARTBEAT_SECONDS", 1)),
    "POLL_SECONDS": 0.05,
    "SHUTDOWN_TIMEOUT": 10,
    "RETRY": {"BASE_DELAY": 0.0, "MAX_DELAY": 0.0, "JITTER": 0.0},
}
# A worker process ends when the pytest that started it is gone (killed, timed out).
if os.environ.get("OUTBOX_TEST_PARENT_PID"):
    from tests import orphan_guard

    orphan_guard.start(int(os.environ["OUTBOX_TEST_PARENT_PID"]))
# A process test raises the prefetch of the worker processes it starts.
if os.environ.get("OUTBOX_TEST_PREFETCH"):
    OUTBOX["PREFETCH"] = int(os.environ["OUTBOX_TEST_PREFETCH"])
# A process test gives its workers brokers to relay to (JSON: OUTBOX["BROKERS"]), and the
# relay's options.
if os.environ.get("OUTBOX_TEST_BROKERS"):
    import json

    OUTBOX["BROKERS"] = json.loads(os.environ["OUTBOX_TEST_BROKERS"])
    OUTBOX["RELAY"] = json.loads(os.environ.get("OUTBOX_TEST_RELAY", "{}"))
# A process test gives its workers a health rule of its own (JSON: OUTBOX["HEALTH"]).
if os.environ.get("OUTBOX_TEST_HEALTH"):
    import json

    OUTBOX["HEALTH"] = json.loads(os.environ["OUTBOX_TEST_HEALTH"])
# A process test gives its workers a cron entry (tests/cron/test_processes.py).
if os.environ.get("OUTBOX_TEST_CRON"):
    OUTBOX["CRON"] = {
        "every-minute": {"TASK": "tests.testapp.tasks.note_cron_tick", "SCHEDULE": "* * * * *"}
    }
# A chaos test starts a worker whose host clock is off.
if os.environ.get("OUTBOX_TEST_CLOCK_SKEW_SECONDS"):
    import tests.skewed_clock  # noqa: F401
# Prepared statements on PostgreSQL, as the README recommends (one leg of `make test`).
if os.environ.get("OUTBOX_TEST_PREPARE_THRESHOLD") and DATABASES["default"]["ENGINE"].endswith(
    "postgresql"
):
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = int(
        os.environ["OUTBOX_TEST_PREPARE_THRESHOLD"]
    )

# Django's tasks framework on the outbox (django_outbox.backends): django.tasks on Django 6, the
# django-tasks backport (the "tasks" extra, installed on the 5.2 leg) on Django 5.2.
try:
    if not TYPE_CHECKING and django.VERSION < (6, 0):
        import django_tasks  # noqa: F401

        INSTALLED_APPS.append("django_tasks")
    TASKS = {
        "default": {
            "BACKEND": "django_outbox.backends.OutboxBackend",
            "QUEUES": ["default", "emails"],
        },
        "non_atomic": {
            "BACKEND": "django_outbox.backends.OutboxBackend",
            "OPTIONS": {"ATOMIC": False},
        },
        # Retries opted in for every task of a backend.
        "retrying": {
            "BACKEND": "django_outbox.backends.OutboxBackend",
            "OPTIONS": {"MAX_ATTEMPTS": 3},
        },
    }
except ImportError:
    pass

# Django's backends with a cheaper flush between tests (tests/backends): the same SQL otherwise.
DATABASES["default"]["ENGINE"] = {
    "django.db.backends.sqlite3": "tests.backends.sqlite3",
    "django.db.backends.postgresql": "tests.backends.postgresql",
}.get(DATABASES["default"]["ENGINE"], DATABASES["default"]["ENGINE"])
