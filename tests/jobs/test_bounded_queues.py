"""OUTBOX["QUEUES"][name]["MAX_SIZE"]: a queue holds at most that many waiting jobs."""

import threading

import pytest
from django.db import close_old_connections, connection, transaction

from django_outbox import EnqueueError, QueueFull
from django_outbox.db import queries_for
from django_outbox.models import Job, JobStatus
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bounded(settings):
    """The queue "small" holds at most 3 waiting jobs."""
    settings.OUTBOX = {**settings.OUTBOX, "QUEUES": {"small": {"MAX_SIZE": 3}}}


def test_a_full_queue_refuses_the_next_job_with_its_size_and_limit(bounded):
    for n in range(3):
        tasks.noop.enqueue({"n": n}, queue="small")
    with transaction.atomic():
        with pytest.raises(QueueFull) as full:
            tasks.noop.enqueue({"n": 3}, queue="small")
        # The caller's transaction is usable, and other queues are not bounded.
        tasks.noop.enqueue({"n": 4}, queue="other")
    assert (full.value.queue, full.value.size, full.value.limit) == ("small", 3, 3)
    assert isinstance(full.value, EnqueueError)
    assert "Queue 'small' is full: 3 jobs wait and its MAX_SIZE is 3" in str(full.value)
    assert Job.objects.filter(queue="small").count() == 3


def test_fair_jobs_count_with_the_others(bounded):
    tasks.noop.enqueue(queue="small")
    tasks.noop.enqueue_many([{}, {}], queue="small", fair_key="tenant")
    with pytest.raises(QueueFull) as full:
        tasks.noop.enqueue(queue="small", fair_key="other")
    assert full.value.size == 3
    with pytest.raises(QueueFull):
        tasks.noop.enqueue(queue="small")


def test_only_waiting_jobs_count_and_room_comes_back_as_they_are_taken(bounded):
    jobs = [tasks.noop.enqueue(queue="small") for _ in range(3)]
    # One running, one finished: two places free again (a retrying job would still count).
    queries_for(connection).claim(connection, "w", ["small"], 1, 30)
    Job.objects.filter(pk=jobs[1].pk).update(status=JobStatus.SUCCEEDED)
    Job.objects.filter(pk=jobs[2].pk).update(status=JobStatus.RETRYING)
    tasks.noop.enqueue(queue="small")
    tasks.noop.enqueue(queue="small")
    with pytest.raises(QueueFull):
        tasks.noop.enqueue(queue="small")


def test_enqueue_many_is_all_or_nothing_against_the_bound(bounded):
    tasks.noop.enqueue(queue="small")
    with pytest.raises(QueueFull, match="so 3 more jobs cannot be enqueued"):
        tasks.noop.enqueue_many([{}, {}, {}], queue="small")
    assert Job.objects.count() == 1
    assert len(tasks.noop.enqueue_many([{}, {}], queue="small")) == 2


def test_a_duplicate_of_a_waiting_unique_job_needs_no_room(bounded):
    first = tasks.noop.enqueue(queue="small", unique_key="k")
    tasks.noop.enqueue(queue="small")
    tasks.noop.enqueue(queue="small")
    assert tasks.noop.enqueue(queue="small", unique_key="k").pk == first.pk


def _enqueue_in_a_thread(outcomes, started):
    try:
        started.set()
        tasks.noop.enqueue(queue="small")
        outcomes.append("enqueued")
    except QueueFull:
        outcomes.append("full")
    finally:
        close_old_connections()
        connection.close()


def test_concurrent_enqueuers_cannot_overshoot_the_bound(bounded):
    tasks.noop.enqueue(queue="small")
    tasks.noop.enqueue(queue="small")
    outcomes: list[str] = []
    started = threading.Event()
    with transaction.atomic():
        tasks.noop.enqueue(queue="small")  # The last place, not yet committed.
        thread = threading.Thread(target=_enqueue_in_a_thread, args=(outcomes, started))
        thread.start()
        assert started.wait(10)
        # The other enqueuer waits for this transaction before it counts.
        thread.join(0.5)
        assert outcomes == []
    thread.join(30)
    assert outcomes == ["full"]
    assert Job.objects.filter(queue="small").count() == 3


@pytest.mark.parametrize("max_size", [0, -1, 1.5, "10", True])
def test_a_bad_max_size_is_a_settings_error(settings, max_size):
    from django_outbox.checks import check_outbox_setting

    settings.OUTBOX = {"QUEUES": {"small": {"MAX_SIZE": max_size}}}
    errors = check_outbox_setting()
    assert [error.id for error in errors] == ["django_outbox.E008"]
    assert "OUTBOX['QUEUES']['small']['MAX_SIZE']" in errors[0].msg
