"""Take the admin's screenshots in docs/images/ as a user's project shows them.

Run from the repository's top, with chromium installed (``make screenshots``)::

    .venv/bin/python tools/screenshots.py

It installs the package from a wheel built from this checkout into a virtualenv of a copy of the
example project (``SITE``, a fixed path, so that tracebacks show the paths a user's would: the
project's files and site-packages), runs the example's ``manage.py demo`` there (its bouncing
signup's job fails for good through a real worker), fills the database with waiting, running
and halted jobs, failed ones with the errors of a bad night, a day of per-minute activity, live
workers, one in error and one that stopped heartbeating, serves it with ``runserver`` (every
request logged in as a superuser, by a middleware of this script's settings), and has headless
chromium take, at 1440x900 (a laptop), 1024x768 (a small window) and 390x844 (a phone):

- ``failed-list-<size>.png``: the failed jobs, latest failure first;
- ``failed-job-<size>.png``: the page of the demo's failed job (its first screen: summary,
  error, actions; then its history and payload);
- ``dashboard-<size>.png``: the admin's dashboard.
"""

from __future__ import annotations

import datetime
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGES = REPO / "docs" / "images"
#: Where the user's project is set up: its path is part of the tracebacks the pictures show.
SITE = Path(tempfile.gettempdir()) / "shop"
PORT = 8765

SETTINGS = '''
from example.settings import *  # noqa: F403

MIDDLEWARE = [*MIDDLEWARE, "screenshot_settings.LoggedIn"]  # noqa: F405
OUTBOX = {  # noqa: F405
    **OUTBOX,  # noqa: F405
    "CRON": {
        "nightly-digest": {
            "TASK": "signups.tasks.send_welcome_email",
            "SCHEDULE": "0 3 * * *",
            "PAYLOAD": {"user_id": 1},
            "TIMEZONE": "Europe/Paris",
        },
        "bounce-report": {
            "TASK": "signups.tasks.send_welcome_email",
            "SCHEDULE": "*/15 * * * *",
            "PAYLOAD": {"user_id": 2},
        },
    },
}


class LoggedIn:
    """Log every request in as the superuser: the screenshot needs no login form."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from django.contrib.auth import get_user_model

        request.user = get_user_model().objects.get(username="admin")
        request._cached_user = request.user
        return self.get_response(request)
'''


def fill() -> None:
    """Write the jobs, the activity and the workers the picture shows."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from django_outbox.jobs.transitions import database_time_in
    from django_outbox.models import Job, JobStatus, QueueActivity, WorkerProcess
    from django_outbox.tasks.enqueue import build_job

    get_user_model().objects.create_superuser("admin", "admin@example.com", "admin")
    now = timezone.now()
    rng = random.Random(7)
    task = "signups.tasks.send_welcome_email"
    jobs = []
    for queue, ready, retrying, running, halted, oldest in (
        ("emails", 42, 3, 8, 0, 95),
        ("reports", 7, 0, 2, 2, 410),
        ("webhooks", 310, 12, 16, 0, 38),
        ("default", 0, 0, 1, 0, 0),
    ):
        for number in range(ready):
            job = build_job(task, {"user_id": number}, queue=queue)
            job.run_at = now - datetime.timedelta(seconds=rng.uniform(0, oldest))
            jobs.append(job)
        for status, count in (
            (JobStatus.RETRYING, retrying),
            (JobStatus.RUNNING, running),
            (JobStatus.HALTED, halted),
        ):
            for number in range(count):
                job = build_job(task, {"user_id": number}, queue=queue)
                job.status, job.attempts = status, 1
                if status == JobStatus.RUNNING:
                    job.lease_token = uuid.uuid4()
                    job.lease_expires_at = now + datetime.timedelta(seconds=60)
                jobs.append(job)
    Job.objects.bulk_create(jobs)

    # A bad night's failed jobs: a payment provider down, a template missing, a bad payload.
    failures = [
        (
            "webhooks",
            "ConnectionError: HTTPSConnectionPool(host='api.payments.example', port=443): Max "
            "retries exceeded with url: /v1/charges (Caused by NewConnectionError('Failed to "
            "establish a new connection: [Errno 111] Connection refused'))",
        ),
        ("emails", "TemplateDoesNotExist: emails/welcome_de.html"),
        ("emails", "KeyError: 'email'"),
        ("reports", "TimeoutError: the report query ran for more than 300 s"),
    ]
    failed_jobs = []
    for number in range(18):
        queue, error = failures[number % len(failures)]
        job = build_job(task, {"user_id": 1000 + number}, queue=queue)
        job.status, job.attempts = JobStatus.FAILED, job.max_attempts
        job.worker_id = f"worker-b21e8:4114:{number:06x}"
        job.enqueued_at = now - datetime.timedelta(minutes=90 + 7 * number)
        job.finished_at = now - datetime.timedelta(minutes=3 + 4 * number, seconds=number * 7)
        job.last_error = error
        job.errors = [
            {
                "attempt": attempt,
                "at": job.finished_at.isoformat(),
                "worker": job.worker_id,
                "error": error,
            }
            for attempt in range(1, job.max_attempts + 1)
        ]
        failed_jobs.append(job)
    Job.objects.bulk_create(failed_jobs)

    minute = now.replace(second=0, microsecond=0)
    rows = []
    for queue, rate, failing in (("emails", 40, 0.02), ("reports", 3, 0.0), ("webhooks", 90, 0.05)):
        for ago in range(1440):
            # A working day's shape, some noise, and webhooks failing for a while an hour ago.
            hour = (minute - datetime.timedelta(minutes=ago)).hour
            shape = 0.35 + 0.65 * math.sin(math.pi * max(0, min(1, (hour - 6) / 14)))
            attempts = max(0, int(rng.gauss(rate * shape, rate * 0.12)))
            share = failing * (6 if queue == "webhooks" and 55 <= ago <= 75 else 1)
            retried = sum(rng.random() < share for _ in range(attempts))
            failed = sum(rng.random() < share / 8 for _ in range(attempts))
            rows.append(
                QueueActivity(
                    queue=queue,
                    minute=minute - datetime.timedelta(minutes=ago),
                    succeeded=attempts - retried - failed,
                    retried=retried,
                    failed=failed,
                )
            )
    # The made-up day replaces the demo's few minutes of activity.
    QueueActivity.objects.all().delete()
    QueueActivity.objects.bulk_create(rows)

    for number, (host, queues, done, failed, error) in enumerate(
        [
            ("worker-7f9c4", [], 182_344, 3_120, ""),
            ("worker-7f9c4", [], 180_912, 2_987, ""),
            ("worker-b21e8", ["webhooks"], 96_410, 5_830, ""),
            ("worker-d04a1", ["emails", "reports"], 41_207, 311, "OperationalError: "),
        ],
        start=1,
    ):
        pid = 4100 + number * 7
        WorkerProcess.objects.create(
            worker_id=f"{host}:{pid}:{uuid.uuid4().hex[:6]}",
            instance=uuid.uuid4(),
            host=host,
            pid=pid,
            queues=queues,
            concurrency=8,
            started_at=now - datetime.timedelta(hours=6, minutes=number * 13),
            heartbeat_seconds=10,
            jobs_done=done,
            jobs_failed=failed,
            in_error_since=now - datetime.timedelta(seconds=24) if error else None,
            last_error_at=now if error else None,
            last_error=error + "connection to server failed: timeout expired" if error else "",
        )
    gone = WorkerProcess.objects.create(
        worker_id="worker-a8812:4077:9e01c2",
        instance=uuid.uuid4(),
        host="worker-a8812",
        pid=4077,
        concurrency=8,
        started_at=now - datetime.timedelta(days=1),
        heartbeat_seconds=10,
    )
    WorkerProcess.objects.filter(pk=gone.pk).update(last_heartbeat_at=database_time_in(-540))

    # The cron entries of the settings above: the quarter-hourly one ran at its last tick.
    from django_outbox.cron import declared_entries
    from django_outbox.cron.scheduler import enqueue_due

    entries = [entry for entry in declared_entries() if entry.name == "bounce-report"]
    enqueue_due(entries, now=now - datetime.timedelta(minutes=20), using="default")
    for job in enqueue_due(entries, now=now, using="default"):
        Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, finished_at=now)


def run(*command: str | Path, env: dict[str, str] | None = None, **options: object) -> None:
    subprocess.run([str(part) for part in command], env=env, check=True, **options)  # type: ignore[call-overload]


def set_up_site(python: str) -> Path:
    """Copy the example project to SITE and install the package's wheel in its virtualenv."""
    shutil.rmtree(SITE, ignore_errors=True)
    shutil.copytree(
        REPO / "example_project",
        SITE,
        ignore=shutil.ignore_patterns("*.sqlite3*", "__pycache__"),
    )
    with tempfile.TemporaryDirectory() as wheels:
        run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, REPO)
        (wheel,) = Path(wheels).glob("*.whl")
        run(python, "-m", "venv", SITE / ".venv")
        venv_python = SITE / ".venv" / "bin" / "python"
        run(venv_python, "-m", "pip", "install", "--quiet", wheel, "django>=6.0", "django-environ")
    (SITE / "screenshot_settings.py").write_text(SETTINGS)
    shutil.copy(Path(__file__), SITE / "screenshots.py")
    return SITE / ".venv" / "bin" / "python"


#: The viewports each page is taken at: a laptop, a small window, a phone.
SIZES = ("1440x900", "1024x768", "390x844")


def screenshot(url: str, output: Path, size: str) -> None:
    run(
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--screenshot={output}",
        f"--window-size={size}",
        url,
        capture_output=True,
        timeout=120,
    )
    print(f"Wrote {output}")


def failed_job_id() -> None:
    """Print the id of the demo's job that failed for good (run in the site's Django)."""
    from django_outbox.models import Job, JobStatus

    print(
        Job.objects.filter(status=JobStatus.FAILED).order_by("pk").values_list("pk", flat=True)[0]
    )


def main() -> None:
    python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    site_python = set_up_site(python)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(
        DATABASE_URL=f"sqlite:///{SITE}/demo.sqlite3",
        DJANGO_SETTINGS_MODULE="screenshot_settings",
        OUTBOX_LOG_LEVEL="WARNING",
    )
    manage = [site_python, SITE / "manage.py"]
    run(*manage, "migrate", "-v0", env=env, cwd=SITE)
    run(*manage, "demo", env=env, cwd=SITE, stdout=subprocess.DEVNULL)
    django = "import django; django.setup(); import screenshots; screenshots."
    run(site_python, "-c", django + "fill()", env=env, cwd=SITE)
    failed = subprocess.run(
        [site_python, "-c", django + "failed_job_id()"],
        env=env,
        cwd=SITE,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    server = subprocess.Popen(
        [*map(str, manage), "runserver", "--noreload", f"127.0.0.1:{PORT}"],
        env=env,
        cwd=SITE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    admin = f"http://127.0.0.1:{PORT}/admin/django_outbox"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{admin}/dashboard/", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        # The dashboard first: its workers' heartbeats, written by fill(), go stale in a minute.
        pages = {
            "dashboard": f"{admin}/dashboard/",
            "failed-list": f"{admin}/job/?status__exact=failed",
            "failed-job": f"{admin}/job/{failed}/change/",
        }
        for name, url in pages.items():
            for size in SIZES:
                screenshot(url, IMAGES / f"{name}-{size}.png", size.replace("x", ","))
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
