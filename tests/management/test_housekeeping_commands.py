"""manage.py outbox_retry and outbox_prune, and django_outbox.housekeeping behind them."""

import datetime
import io
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_outbox.jobs.housekeeping import jobs_to_retry, prune, prune_candidates
from django_outbox.management.arguments import parse_duration
from django_outbox.models import Job, JobStatus
from tests.helpers import REPO, run_worker
from tests.processes import worker_env
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def ended(job, status, *, days_ago=0.0, error="ValueError: boom"):
    """Make ``job`` one that ended in ``status`` ``days_ago`` days ago, after one attempt."""
    Job.objects.filter(pk=job.pk).update(
        status=status,
        attempts=1,
        finished_at=timezone.now() - datetime.timedelta(days=days_ago),
        last_error=error if status == JobStatus.FAILED else "",
    )
    return job.pk


def statuses():
    return dict(Job.objects.values_list("pk", "status"))


def run(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# Durations.


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("1h", 3600), ("7d", 7 * 86400), ("2w", 14 * 86400)],
)
def test_parse_duration_reads_seconds_and_units(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "soon", "7x", "nan", "inf", "99999d"])
def test_parse_duration_refuses_what_is_not_a_positive_duration(text):
    with pytest.raises(ValueError, match=r"duration|more than 0"):
        parse_duration(text)


# outbox_retry.


def test_retry_by_id_makes_failed_and_cancelled_jobs_ready():
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    cancelled = ended(tasks.noop.enqueue(), JobStatus.CANCELLED)
    other = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    assert run("outbox_retry", str(failed), str(cancelled)) == "Retried 2 jobs.\n"
    assert statuses() == {
        failed: JobStatus.READY,
        cancelled: JobStatus.READY,
        other: JobStatus.FAILED,
    }
    job = Job.objects.get(pk=failed)
    assert job.finished_at is None
    assert job.max_attempts >= 2


def test_retry_by_queue_and_task_selects_failed_jobs_only():
    default_failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    default_cancelled = ended(tasks.noop.enqueue(), JobStatus.CANCELLED)
    emails_failed = ended(tasks.write_note.enqueue({"text": "x"}), JobStatus.FAILED)
    assert run("outbox_retry", "--queue", "default") == "Retried 1 job.\n"
    assert statuses() == {
        default_failed: JobStatus.READY,
        default_cancelled: JobStatus.CANCELLED,
        emails_failed: JobStatus.FAILED,
    }
    assert run("outbox_retry", "--task", tasks.write_note.name) == "Retried 1 job.\n"
    assert statuses()[emails_failed] == JobStatus.READY


def test_retry_all_failed_and_the_jobs_run_again():
    first = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    second = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    done = ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED)
    assert run("outbox_retry", "--all-failed") == "Retried 2 jobs.\n"
    run_worker(burst=True)
    assert statuses() == {
        first: JobStatus.SUCCEEDED,
        second: JobStatus.SUCCEEDED,
        done: JobStatus.SUCCEEDED,
    }


def test_retry_dry_run_lists_the_jobs_and_changes_nothing():
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED, error="ValueError: boom\ntrace")
    output = run("outbox_retry", "--all-failed", "--dry-run")
    assert f"#{failed} {tasks.noop.name} queue=default failed attempts=1 ValueError: boom\n" in (
        output
    )
    assert output.endswith("Would retry 1 job (dry run: nothing changed).\n")
    assert statuses() == {failed: JobStatus.FAILED}


def test_retry_refuses_to_run_without_a_selector():
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    with pytest.raises(CommandError, match="Say which jobs to retry"):
        call_command("outbox_retry")
    assert statuses() == {failed: JobStatus.FAILED}


def test_retry_refuses_unknown_ids_and_retries_none_of_the_others():
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    with pytest.raises(CommandError, match=f"No job has id {failed + 1000}; nothing"):
        call_command("outbox_retry", str(failed), str(failed + 1000))
    assert statuses() == {failed: JobStatus.FAILED}


def test_retry_refuses_named_jobs_that_are_not_failed_or_cancelled():
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    ready = tasks.noop.enqueue().pk
    with pytest.raises(CommandError, match=f"job {ready} is ready. Nothing was retried"):
        call_command("outbox_retry", str(failed), str(ready))
    assert statuses() == {failed: JobStatus.FAILED, ready: JobStatus.READY}


@pytest.mark.parametrize("bad_id", ["x", "0", "-3", "1.5"])
def test_retry_refuses_ids_that_are_not_positive_whole_numbers(bad_id):
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    with pytest.raises(CommandError, match="argument ids: expected"):
        call_command("outbox_retry", str(failed), bad_id)
    assert statuses() == {failed: JobStatus.FAILED}


def run_command_process(*args):
    """Run ``manage.py ARGS`` as a process against the test database, as an operator does."""
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=REPO,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_commands_exit_with_an_error_status_and_a_message_on_bad_input():
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    # Refused by the command: status 1.
    refused = run_command_process("outbox_retry", str(failed + 1000))
    assert refused.returncode == 1
    assert f"No job has id {failed + 1000}" in refused.stderr
    # Refused by argument parsing: status 2, with the usage.
    unparsed = run_command_process("outbox_prune", "--older-than", "soon")
    assert unparsed.returncode == 2
    assert "not a duration such as 90" in unparsed.stderr
    assert statuses() == {failed: JobStatus.FAILED}


def test_jobs_to_retry_narrows_by_every_selector_given():
    failed = ended(tasks.noop.enqueue(), JobStatus.FAILED)
    ended(tasks.write_note.enqueue({"text": "x"}), JobStatus.FAILED)
    selected = jobs_to_retry(queue="default", task=tasks.noop.name, all_failed=True)
    assert list(selected.values_list("pk", flat=True)) == [failed]
    assert not jobs_to_retry(ids=[failed], queue="emails").exists()


# outbox_prune.


def test_prune_deletes_finished_jobs_older_than_the_limit():
    old_succeeded = ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=8)
    old_failed = ended(tasks.noop.enqueue(), JobStatus.FAILED, days_ago=8)
    old_cancelled = ended(tasks.noop.enqueue(), JobStatus.CANCELLED, days_ago=8)
    new_succeeded = ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=6)
    waiting = tasks.noop.enqueue().pk
    Job.objects.filter(pk=waiting).update(enqueued_at=timezone.now() - datetime.timedelta(days=30))
    assert run("outbox_prune", "--older-than", "7d") == "Deleted 3 jobs.\n"
    assert set(statuses()) == {new_succeeded, waiting}
    assert not {old_succeeded, old_failed, old_cancelled} & set(statuses())


def test_prune_by_status_keeps_the_other_statuses():
    old_succeeded = ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=8)
    old_failed = ended(tasks.noop.enqueue(), JobStatus.FAILED, days_ago=8)
    assert run("outbox_prune", "--older-than", "1w", "--status", "succeeded") == (
        "Deleted 1 job.\n"
    )
    assert set(statuses()) == {old_failed}
    assert old_succeeded not in statuses()


def test_prune_deletes_in_batches_until_done():
    for _ in range(7):
        ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=2)
    assert prune(86400, batch_size=2, pause=0) == 7
    assert not Job.objects.exists()


def test_prune_dry_run_counts_and_deletes_nothing():
    ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=8)
    ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=8)
    ended(tasks.noop.enqueue(), JobStatus.FAILED, days_ago=1)
    output = run("outbox_prune", "--older-than", "7d", "--dry-run")
    assert output == (
        "succeeded: 2\nfailed: 0\ncancelled: 0\n"
        "Would delete up to 2 jobs (dry run: nothing changed).\n"
    )
    assert Job.objects.count() == 3


def test_prune_keeps_a_job_an_unfinished_job_depends_on():
    parent = tasks.noop.enqueue()
    run_worker(burst=True)
    child = tasks.noop.enqueue(depends_on=parent, delay=3600)
    Job.objects.filter(pk=parent.pk).update(
        finished_at=timezone.now() - datetime.timedelta(days=30)
    )
    assert prune_candidates(7 * 86400).with_dependents == 1
    assert "1 of them have dependents" in run("outbox_prune", "--older-than", "7d", "--dry-run")
    assert run("outbox_prune", "--older-than", "7d") == "Deleted 0 jobs.\n"
    assert set(statuses()) == {parent.pk, child.pk}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--older-than"),
        (["--older-than", "soon"], "not a duration"),
        (["--older-than", "0"], "more than 0"),
        (
            ["--older-than", "7d", "--status", "ready"],
            r"invalid choice: 'ready' \(choose from '?succeeded'?, '?failed'?, '?cancelled'?\)",
        ),
        (["--older-than", "7d", "--batch-size", "0"], "expected"),
    ],
)
def test_prune_refuses_bad_input_and_deletes_nothing(args, message):
    ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=30)
    with pytest.raises(CommandError, match=message):
        call_command("outbox_prune", *args)
    assert Job.objects.count() == 1


def test_prune_refuses_a_batch_size_past_its_limit_and_deletes_nothing():
    ended(tasks.noop.enqueue(), JobStatus.SUCCEEDED, days_ago=30)
    with pytest.raises(CommandError, match="--batch-size: expected a number <= 100000"):
        call_command("outbox_prune", "--older-than", "7d", "--batch-size", "100001")
    assert Job.objects.count() == 1
