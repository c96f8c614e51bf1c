"""``Task.using(**options)``: a copy of a task that enqueues with other options by default."""

import datetime

import pytest
from django.utils import timezone

from django_outbox import EnqueueError, JobStatus, signals
from django_outbox.jobs.options import OPTION_NAMES
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db


def test_the_copy_enqueues_with_its_options_and_the_task_keeps_its_own():
    urgent = tasks.write_note.using(queue="urgent", priority=7)
    job = urgent.enqueue({"text": "now"})
    plain = tasks.write_note.enqueue({"text": "later"})
    assert (job.task_name, job.queue, job.priority) == (tasks.write_note.name, "urgent", 7)
    assert (plain.queue, plain.priority) == ("emails", 0)
    assert urgent is not tasks.write_note
    assert tasks.write_note.options == {}


def test_options_given_to_enqueue_win_over_the_copys():
    job = tasks.noop.using(queue="a", priority=3).enqueue({}, queue="b")
    assert (job.queue, job.priority) == ("b", 3)


def test_copies_stack_and_a_delay_counts_from_each_enqueue():
    later = tasks.noop.using(queue="a").using(delay=datetime.timedelta(hours=1))
    before = timezone.now()
    job = later.enqueue({})
    assert job.queue == "a"
    assert before + datetime.timedelta(minutes=59) < job.run_at
    assert job.run_at < timezone.now() + datetime.timedelta(minutes=61)


def test_enqueue_many_takes_the_copys_options():
    jobs = tasks.noop.using(queue="bulk", priority=2).enqueue_many([{}, {}])
    assert [(job.queue, job.priority) for job in jobs] == [("bulk", 2), ("bulk", 2)]


def test_a_copy_with_single_job_options_refuses_enqueue_many():
    unique = tasks.noop.using(unique_key="k")
    with pytest.raises(TypeError, match="takes no unique_key"):
        unique.enqueue_many([{}])


def test_an_unknown_option_is_a_type_error_listing_the_options():
    with pytest.raises(TypeError, match=r"unknown option 'prority'.*priority"):
        tasks.noop.using(prority=1)  # type: ignore[call-arg]
    assert {"delay", "run_at", "queue", "priority", "lock", "fair_key"} <= OPTION_NAMES


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": "high"}, "priority must be"),
        ({"queue": ""}, "queue name"),
        ({"delay": -1}, "must not be negative"),
        ({"lock": "a", "fair_key": "b"}, "lock or fair_key"),
        ({"unique_while": "always"}, "unique_while must be one of"),
        ({"depends_on": "7"}, "depends_on must name jobs"),
    ],
)
def test_a_bad_option_raises_at_using_not_at_a_later_enqueue(options, message):
    with pytest.raises(EnqueueError, match=message):
        tasks.noop.using(**options)


def test_signals_name_the_declared_task_whatever_copy_enqueued():
    senders = []

    def record(sender, job, **kwargs):
        senders.append(sender)

    signals.job_enqueued.connect(record)
    try:
        tasks.noop.using(queue="a").enqueue({})
    finally:
        signals.job_enqueued.disconnect(record)
    assert senders == [tasks.noop]


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_copys_jobs_as_the_task():
    job = tasks.write_note.using(queue="notes").enqueue({"text": "from a copy"})
    run_worker(queues=["notes"])
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert Note.objects.get().text == "from a copy"
