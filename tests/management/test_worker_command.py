"""manage.py run_outbox_worker's options: checked at parsing, --exclude-queue, verbosity."""

import io
import json
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from django_outbox import signals
from django_outbox.models import Job, JobStatus
from django_outbox.worker.loop import Worker
from tests.helpers import REPO
from tests.processes import worker_env
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def run_command(*args):
    out = io.StringIO()
    call_command("run_outbox_worker", "--burst", "--concurrency", "1", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--worker-id", "A" * 256], "at most 255 characters (the worker_id column's length)"),
        (["--worker-id", ""], "A worker id must be a non-empty string"),
        (["--worker-id", "   "], "A worker id must be a non-empty string"),
        (["--worker-id", "a\x00b"], "NUL character"),
        # A newline would forge log lines: every line of the worker names it.
        (["--worker-id", "w1\nFORGED LOG LINE"], "contains a control character ('\\n' at index 2)"),
        (["--worker-id", "w1\tx"], "contains a control character"),
        (["--queue", ""], "A queue name must be a non-empty string"),
        (["--queue", "q" * 101], "longer than 100 characters"),
        (["--exclude-queue", ""], "A queue name must be a non-empty string"),
        (["--concurrency", "0"], "expected a number >= 1, got 0"),
        (["--processes", "-1"], "expected a number >= 1"),
        (["--max-jobs", "x"], "expected a whole number, got 'x'"),
        (["--shutdown-timeout", "nan"], "expected a finite number"),
        (["--prefetch", "-1"], "expected auto or a whole number from 0 to 100000, got '-1'"),
        (["--prefetch", "fast"], "expected auto or a whole number from 0 to 100000"),
    ],
)
def test_an_option_out_of_bounds_is_refused_at_parsing(args, message):
    with pytest.raises(CommandError, match="argument") as raised:
        run_command(*args)
    assert message in str(raised.value)
    assert not Job.objects.exists()


def test_a_worker_id_too_long_once_numbered_for_its_processes_is_refused():
    with pytest.raises(CommandError, match="with --processes 2 the workers are named"):
        run_command("--worker-id", "A" * 254, "--processes", "2")


@pytest.mark.parametrize("processes", ["1", "2"])
def test_relay_only_without_a_broker_is_refused_before_any_process_starts(settings, processes):
    settings.OUTBOX = {key: value for key, value in settings.OUTBOX.items() if key != "BROKERS"}
    with pytest.raises(CommandError, match="names no broker"):
        call_command("run_outbox_worker", "--relay-only", "--processes", processes)


def test_queue_and_exclude_queue_are_one_or_the_other():
    with pytest.raises(CommandError, match="Give one or the other"):
        run_command("--queue", "emails", "--exclude-queue", "default")


def test_a_worker_refuses_a_bad_worker_id_and_both_queues_and_exclusions():
    for bad in ("", "A" * 256):
        with pytest.raises(ValueError, match="worker id"):
            Worker(worker_id=bad)
    with pytest.raises(ValueError, match="not both"):
        Worker(queues=["a"], exclude_queues=["b"])


def test_a_worker_id_of_the_column_s_length_runs_jobs():
    job = tasks.noop.enqueue()
    run_command("--worker-id", "W" * 255)
    job.refresh_from_db()
    assert (job.status, job.worker_id) == (JobStatus.SUCCEEDED, "W" * 255)


def test_exclude_queue_runs_every_queue_but_those_it_names():
    kept = tasks.noop.enqueue(queue="default")
    other = tasks.noop.enqueue(queue="reports")
    excluded = tasks.noop.enqueue(queue="emails")
    excluded_too = tasks.noop.enqueue(queue="bulk")
    run_command("--exclude-queue", "emails", "--exclude-queue", "bulk")
    status = dict(Job.objects.values_list("pk", "status"))
    assert status[kept.pk] == status[other.pk] == JobStatus.SUCCEEDED
    assert status[excluded.pk] == status[excluded_too.pk] == JobStatus.READY
    # Excluding a queue no job has runs everything.
    run_command("--exclude-queue", "missing")
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}


def test_exclusions_leave_fair_and_keyed_jobs_of_excluded_queues_too():
    fair = tasks.noop.enqueue(queue="emails", fair_key="tenant-1")
    keyed = tasks.noop.enqueue(queue="emails", lock="order-1")
    run = tasks.noop.enqueue(queue="default", fair_key="tenant-1")
    run_command("--exclude-queue", "emails")
    status = dict(Job.objects.values_list("pk", "status"))
    assert status[fair.pk] == status[keyed.pk] == JobStatus.READY
    assert status[run.pk] == JobStatus.SUCCEEDED


@pytest.mark.process
@pytest.mark.parametrize(("verbosity", "shown"), [("0", False), ("1", True), ("3", True)])
def test_verbosity_shows_django_s_task_lines_as_its_reference_worker_does(verbosity, shown):
    from django_outbox.apps import uses_task_backend

    if not uses_task_backend():
        pytest.skip("neither django.tasks nor its backport is installed")
    from tests.testapp import django_tasks

    result = django_tasks.add.enqueue(1, 2)
    finished = subprocess.run(
        [sys.executable, "-m", "django", "run_outbox_worker", "--burst", "-v", verbosity],
        cwd=REPO,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = f"Task id={result.id} path=tests.testapp.django_tasks.add state=SUCCESSFUL"
    assert (line in finished.stderr) is shown, finished.stderr
    assert ("job succeeded" in finished.stderr) is shown
    # DEBUG from -v 2 on: each job's start, and Django's own start line.
    assert ("job started" in finished.stderr) is (verbosity == "3")


@pytest.mark.parametrize(("argument", "adaptive", "prefetch"), [("auto", True, 0), ("7", False, 7)])
def test_prefetch_is_auto_or_a_count(argument, adaptive, prefetch):
    started = []

    def record(sender, worker, **kwargs):
        started.append(worker)

    signals.worker_started.connect(record)
    try:
        run_command("--prefetch", argument)
    finally:
        signals.worker_started.disconnect(record)

    [worker] = started
    assert (worker.auto_prefetch is not None, worker.prefetch) == (adaptive, prefetch)


@pytest.mark.process
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_burst_whose_database_stays_unreachable_gives_up_with_an_error(processes):
    """A burst is a task that ends (a cron job, a CI step): once its database has been
    unreachable for longer than its health allows, each worker stops, is not started again,
    and the command exits with an error, instead of retrying for as long as the outage lasts."""
    finished = subprocess.run(
        [sys.executable, "-m", "django", "run_outbox_worker", "--burst", "--processes", processes],
        cwd=REPO,
        env=worker_env(
            # Nothing listens on port 1: every connection is refused.
            DATABASE_URL="postgres://postgres@127.0.0.1:1/unreachable",
            OUTBOX_TEST_HEALTH=json.dumps({"ALLOWED_ERROR_SECONDS": 1, "GRACE_SECONDS": 0}),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 1, finished.stderr
    assert finished.stderr.count("burst worker gives up") == int(processes), finished.stderr
    assert "Connection refused" in finished.stderr
    if processes == "1":
        assert "--burst: gave up, the database unreachable" in finished.stderr
    else:
        assert finished.stderr.count("started worker process") == 2, finished.stderr
        assert "2 worker process exit(s) were errors" in finished.stderr
