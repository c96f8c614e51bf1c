"""enqueue(unique_key=...): one waiting job per key, however many enqueuers race for it."""

import threading

import pytest
from django.db import close_old_connections, connection, transaction

from django_outbox import DuplicateJob, EnqueueError, enqueue
from django_outbox.db import queries_for
from django_outbox.models import Job, JobStatus
from tests.helpers import run_worker
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_enqueue_with_a_waiting_key_returns_the_first_job():
    first = tasks.noop.enqueue({"n": 1}, unique_key="sync-user-7")
    second = tasks.noop.enqueue({"n": 2}, unique_key="sync-user-7")
    assert not first.is_duplicate
    assert second.is_duplicate
    assert second.pk == first.pk
    assert second.decoded_payload() == {"n": 1}
    assert Job.objects.count() == 1
    # Other keys, and no key, are not affected.
    tasks.noop.enqueue(unique_key="sync-user-8")
    tasks.noop.enqueue()
    tasks.noop.enqueue()
    assert Job.objects.count() == 4


def test_once_the_job_has_run_the_key_is_free_again():
    first = tasks.noop.enqueue(unique_key="k")
    run_worker()
    second = tasks.noop.enqueue(unique_key="k")
    assert not second.is_duplicate
    assert second.pk != first.pk


@pytest.mark.parametrize("status", [JobStatus.RETRYING, JobStatus.HALTED])
def test_retrying_and_halted_jobs_hold_their_key(status):
    first = tasks.noop.enqueue(unique_key="k")
    Job.objects.filter(pk=first.pk).update(status=status)
    assert tasks.noop.enqueue(unique_key="k").pk == first.pk


def test_a_running_job_holds_its_key_only_when_asked():
    first = tasks.noop.enqueue(unique_key="k")
    queries_for(connection).claim(connection, "w", None, 1, 30)
    assert Job.objects.get(pk=first.pk).status == JobStatus.RUNNING
    held = tasks.noop.enqueue(unique_key="k", unique_while="unfinished")
    assert held.is_duplicate
    assert held.pk == first.pk
    new = tasks.noop.enqueue(unique_key="k")
    assert not new.is_duplicate
    assert Job.objects.count() == 2


def test_on_duplicate_raise_names_the_waiting_job_and_leaves_the_transaction_usable():
    first = enqueue(tasks.noop, unique_key="k")
    with transaction.atomic():
        with pytest.raises(DuplicateJob, match=f"Job {first.pk} with unique_key 'k' is ready"):
            tasks.noop.enqueue(unique_key="k", on_duplicate="raise")
        other = tasks.noop.enqueue(unique_key="other")
    assert Job.objects.filter(pk=other.pk).exists()
    with pytest.raises(DuplicateJob) as duplicate:
        tasks.noop.enqueue(unique_key="k", on_duplicate="raise")
    assert duplicate.value.existing.pk == first.pk
    assert isinstance(duplicate.value, EnqueueError)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_key": ""}, "unique_key must be a non-empty string"),
        ({"unique_key": 7}, "unique_key must be a non-empty string"),
        ({"unique_key": "k" * 256}, "at most 255 characters, not 256"),
        ({"unique_key": "a\x00b"}, "unique_key"),
        ({"unique_key": "k", "unique_while": "always"}, "unique_while must be one of"),
        ({"unique_key": "k", "on_duplicate": "ignore"}, "on_duplicate must be one of"),
    ],
)
def test_bad_unique_options_are_refused_and_nothing_is_written(options, message):
    with pytest.raises(EnqueueError, match=message):
        tasks.noop.enqueue(**options)
    assert not Job.objects.exists()


def test_a_rolled_back_unique_enqueue_frees_its_key():
    with transaction.atomic():
        tasks.noop.enqueue(unique_key="k")
        transaction.set_rollback(True)
    assert not tasks.noop.enqueue(unique_key="k").is_duplicate


def _enqueue_in_a_thread(results, started):
    """Enqueue with key "race" on this thread's own connection."""
    try:
        started.set()
        results.append(tasks.noop.enqueue(unique_key="race"))
    finally:
        close_old_connections()
        connection.close()


@pytest.mark.parametrize("first_commits", [True, False])
def test_concurrent_enqueuers_of_one_key_end_with_one_job(first_commits):
    results: list[Job] = []
    started = threading.Event()
    with transaction.atomic():
        first = tasks.noop.enqueue(unique_key="race")
        thread = threading.Thread(target=_enqueue_in_a_thread, args=(results, started))
        thread.start()
        assert started.wait(10)
        # The second enqueuer waits for this transaction to end (an advisory lock on
        # PostgreSQL, the write lock on SQLite): it has returned nothing yet.
        thread.join(0.5)
        assert results == []
        if not first_commits:
            transaction.set_rollback(True)
    thread.join(30)
    assert not thread.is_alive()
    (second,) = results
    if first_commits:
        assert second.is_duplicate
        assert second.pk == first.pk
    else:
        assert not second.is_duplicate
    assert Job.objects.filter(unique_key="race").count() == 1
