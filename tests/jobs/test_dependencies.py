"""enqueue(depends_on=...): a job starts only once every job it depends on has succeeded."""

import datetime

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from django_outbox import EnqueueError
from django_outbox.jobs.transitions import prune_finished, retry_failed
from django_outbox.models import Job, JobDependency, JobStatus
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def status(job):
    return Job.objects.get(pk=job.pk).status


def test_a_dependent_runs_after_its_parent_has_succeeded(settings):
    # The parent first fails once: the dependent must wait through its retry too.
    settings.OUTBOX = {**settings.OUTBOX, "RETRY": {"BASE_DELAY": 3600, "JITTER": 0}}
    parent = tasks.fails_once.enqueue()
    child = tasks.write_note.enqueue({"text": "after the parent"}, depends_on=parent)
    run_worker(queues=[])
    assert (status(parent), status(child)) == (JobStatus.RETRYING, JobStatus.READY)
    assert not Note.objects.filter(text="after the parent").exists()
    Job.objects.filter(pk=parent.pk).update(run_at=timezone.now())
    run_worker()
    assert (status(parent), status(child)) == (JobStatus.SUCCEEDED, JobStatus.SUCCEEDED)
    assert Note.objects.filter(text="after the parent").exists()


def test_a_job_with_several_parents_waits_for_all_of_them():
    first = tasks.noop.enqueue(delay=3600)
    second = tasks.noop.enqueue()
    child = tasks.noop.enqueue(depends_on=[first, second.pk])
    run_worker()
    assert (status(second), status(child)) == (JobStatus.SUCCEEDED, JobStatus.READY)
    Job.objects.filter(pk=first.pk).update(run_at=timezone.now())
    run_worker()
    assert status(child) == JobStatus.SUCCEEDED


def test_a_parent_that_fails_for_good_keeps_its_dependent_waiting_until_retried():
    parent = tasks.always_fails.enqueue()
    Job.objects.filter(pk=parent.pk).update(max_attempts=1)
    child = tasks.noop.enqueue(depends_on=parent)
    run_worker()
    assert (status(parent), status(child)) == (JobStatus.FAILED, JobStatus.READY)
    assert run_worker().claimed == 0
    # Fixed and retried from the admin, the parent succeeds; then the dependent runs.
    Job.objects.filter(pk=parent.pk).update(task_name=tasks.noop.name)
    retry_failed(Job.objects.filter(pk=parent.pk))
    run_worker()
    assert (status(parent), status(child)) == (JobStatus.SUCCEEDED, JobStatus.SUCCEEDED)


def test_a_parent_deleted_by_hand_keeps_its_dependent_waiting():
    parent = tasks.noop.enqueue(delay=60)
    child = tasks.noop.enqueue(depends_on=parent)
    Job.objects.filter(pk=parent.pk).delete()
    assert run_worker().claimed == 0
    assert status(child) == JobStatus.READY


def test_an_unknown_parent_is_an_error_and_nothing_is_written():
    parent = tasks.noop.enqueue()
    with transaction.atomic():
        with pytest.raises(EnqueueError, match="depends_on: no job has id 999999"):
            tasks.noop.enqueue(depends_on=[parent, 999999])
        tasks.noop.enqueue()  # The caller's transaction is usable.
    assert Job.objects.count() == 2
    assert not JobDependency.objects.exists()


@pytest.mark.parametrize(
    ("depends_on", "message"),
    [
        ("12", "not str"),
        (12.5, "not float"),
        ([1, None], "not NoneType"),
        (True, "not bool"),
        (object(), "not object"),
        (list(range(1, 1002)), "at most 1000"),
    ],
)
def test_bad_depends_on_is_refused(depends_on, message):
    with pytest.raises(EnqueueError, match=message):
        tasks.noop.enqueue(depends_on=depends_on)
    assert not Job.objects.exists()


def test_an_unsaved_job_cannot_be_depended_on():
    with pytest.raises(EnqueueError, match="never saved"):
        tasks.noop.enqueue(depends_on=Job(task_name="x", queue="default", max_attempts=1))


def test_the_pruner_keeps_a_parent_while_its_dependent_is_unfinished(settings):
    parent = tasks.noop.enqueue()
    run_worker()
    child = tasks.noop.enqueue(depends_on=parent, delay=3600)
    lonely = tasks.noop.enqueue()
    run_worker()
    long_ago = timezone.now() - datetime.timedelta(days=30)
    Job.objects.filter(pk__in=[parent.pk, lonely.pk]).update(finished_at=long_ago)
    prune_finished("default", {"SUCCEEDED": 60})
    assert set(Job.objects.values_list("pk", flat=True)) == {parent.pk, child.pk}
    # Once the dependent has run, the parent goes too.
    Job.objects.filter(pk=child.pk).update(run_at=timezone.now())
    run_worker()
    Job.objects.filter(pk=child.pk).update(finished_at=long_ago)
    prune_finished("default", {"SUCCEEDED": 60})
    assert not Job.objects.exists()
    assert not JobDependency.objects.exists()


def test_the_admin_shows_what_a_job_waits_for(admin_client):
    done = tasks.noop.enqueue()
    run_worker()
    failed = tasks.noop.enqueue()
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)
    child = tasks.noop.enqueue(depends_on=[done, failed])
    page = admin_client.get(reverse("admin:django_outbox_job_change", args=[child.pk]))
    assert f"#{done.pk} (succeeded), #{failed.pk} (failed)" in page.text
    listing = admin_client.get(reverse("admin:django_outbox_job_changelist"))
    assert "Ready (after its dependencies)" in listing.text
