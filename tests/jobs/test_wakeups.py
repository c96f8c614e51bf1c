"""Wake-ups: an idle worker runs a new job at once, not at its next poll.

On PostgreSQL a statement trigger NOTIFYs channel ``django_outbox`` with the queue's name when due
jobs are inserted (delivered only on commit, one per queue per transaction), and workers LISTEN.
On SQLite, enqueues in the worker's own process wake it once they commit.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from django_outbox import enqueue_many
from django_outbox.db.postgresql.queries import CHANNEL
from django_outbox.jobs import wakeups
from django_outbox.models import Job, JobStatus
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)

#: Far longer than any test waits: a job run within the test's few seconds was woken for.
LONG_POLL = 30
#: How long a woken worker may take to run a job.
WAKE_TIMEOUT = 2

#: A channel of the tests' own: notifications reach a listener in commit order, whatever their
#: channel, so one sent there now arrives after every enqueue committed before it, without
#: waking the worker under test.
MARKER_CHANNEL = "django_outbox_test_marker"


class Rollback(Exception):
    pass


def enqueue_and_roll_back() -> None:
    """Enqueue jobs (one INSERT each way) in a transaction that then rolls back."""
    with suppress(Rollback), transaction.atomic():
        tasks.noop.enqueue({"rolled": "back"})
        tasks.noop.enqueue_many([{}, {}])
        raise Rollback


@pytest.fixture
def idle_worker(settings, worker_thread, claims):
    """Start a worker that polls every 30 s; return it once its first claim found nothing."""
    settings.OUTBOX = {**settings.OUTBOX, "POLL_SECONDS": LONG_POLL}

    def start(**options: Any):
        options.setdefault("concurrency", 2)
        started_at = database_now() if connection.vendor == "postgresql" else None
        worker = worker_thread(**options)
        wait_until(lambda: claims[:1] == [(2, 0)], what="the worker's first claim")
        if connection.vendor == "postgresql":
            wait_until(
                lambda: listeners_since(started_at) >= 1, what="the worker to LISTEN for enqueues"
            )
        return worker

    return start


def database_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def listeners_since(started_at) -> int:
    """Connections to the test database LISTENing on the outbox channel, opened since then."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s AND backend_start >= %s",
            [f"LISTEN {CHANNEL}", started_at],
        )
        return int(cursor.fetchone()[0])


def in_another_thread(function) -> None:
    """Run ``function`` in a thread of its own, so on a database connection of its own."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            function()
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert not errors, errors


def succeeded(job: Job) -> bool:
    return Job.objects.filter(pk=job.pk, status=JobStatus.SUCCEEDED).exists()


# PostgreSQL: the trigger and LISTEN.


@contextmanager
def notifications() -> Iterator[Any]:
    """LISTEN on the outbox channel on a psycopg connection of the test's own."""
    import psycopg

    listener = psycopg.connect(**connection.get_connection_params(), autocommit=True)
    listener.execute(f"LISTEN {CHANNEL}")
    listener.execute(f"LISTEN {MARKER_CHANNEL}")
    try:
        yield listener
    finally:
        listener.close()


def received(listener: Any) -> list[str]:
    """Return the payloads notified on the outbox channel so far, in order."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [MARKER_CHANNEL])
    payloads: list[Any] = []
    for notification in listener.notifies(timeout=5):
        if notification.channel == MARKER_CHANNEL:
            return payloads
        payloads.append(notification.payload)
    pytest.fail(f"the marker notification never arrived; got {payloads}")


@pytest.mark.postgresql
def test_an_idle_worker_is_woken_by_an_enqueue_from_another_connection(idle_worker, claims):
    idle_worker()
    jobs: list[Job] = []

    in_another_thread(lambda: jobs.append(tasks.noop.enqueue({})))

    wait_until(lambda: succeeded(jobs[0]), timeout=WAKE_TIMEOUT, what="the job to run")
    assert claims == [(2, 0), (2, 1)]


@pytest.mark.postgresql
def test_an_idle_worker_is_woken_by_a_job_enqueued_in_a_committed_transaction(idle_worker, claims):
    idle_worker()
    jobs: list[Job] = []

    def enqueue_with_other_writes() -> None:
        with transaction.atomic():
            Note.objects.create(text="the caller's own write")
            jobs.append(tasks.noop.enqueue({}))

    in_another_thread(enqueue_with_other_writes)

    wait_until(lambda: succeeded(jobs[0]), timeout=WAKE_TIMEOUT, what="the job to run")
    assert claims == [(2, 0), (2, 1)]


@pytest.mark.postgresql
def test_a_worker_of_other_queues_is_woken_by_its_own_queue_too(idle_worker, claims):
    idle_worker(queues=["emails"])
    jobs: list[Job] = []

    in_another_thread(lambda: jobs.append(tasks.write_note.enqueue({"text": "hi"})))

    wait_until(lambda: succeeded(jobs[0]), timeout=WAKE_TIMEOUT, what="the job to run")


@pytest.mark.postgresql
def test_a_rolled_back_enqueue_wakes_no_worker_and_never_runs(idle_worker, claims):
    idle_worker()
    with notifications() as listener:
        in_another_thread(enqueue_and_roll_back)
        committed: list[Job] = []
        in_another_thread(lambda: committed.append(tasks.noop.enqueue({"committed": True})))

        # The worker's listener gets what this one gets: only the committed job's wake-up.
        assert received(listener) == ["default"]
    wait_until(lambda: succeeded(committed[0]), timeout=WAKE_TIMEOUT, what="the job to run")
    assert list(Job.objects.values_list("pk", flat=True)) == [committed[0].pk]
    assert claims == [(2, 0), (2, 1)]


@pytest.mark.postgresql
def test_an_enqueue_in_a_transaction_notifies_its_queue_on_commit():
    with notifications() as listener:
        with transaction.atomic():
            Note.objects.create(text="the caller's own write")
            tasks.write_note.enqueue({"text": "welcome"})
            assert list(listener.notifies(timeout=0.05)) == []
        assert received(listener) == ["emails"]


@pytest.mark.postgresql
def test_the_trigger_notifies_once_per_queue_per_transaction():
    with notifications() as listener:
        with transaction.atomic():
            for n in range(5):
                tasks.noop.enqueue({"n": n})
                tasks.write_note.enqueue({"text": str(n)})
            tasks.noop.enqueue_many([{"n": n} for n in range(10)])
            enqueue_many(tasks.noop.name, [{"n": n} for n in range(10)], queue="reports")
            # Nothing is delivered before the commit.
            assert list(listener.notifies(timeout=0.05)) == []
        assert Counter(received(listener)) == Counter({"default": 1, "emails": 1, "reports": 1})

        # Outside a transaction each enqueue commits on its own: one notification each.
        for n in range(3):
            tasks.noop.enqueue({"n": n})
        assert received(listener) == ["default"] * 3


@pytest.mark.postgresql
def test_jobs_due_later_send_no_notification():
    with notifications() as listener:
        tasks.noop.enqueue({}, delay=60)
        tasks.noop.enqueue_many([{"n": n} for n in range(5)], delay=timedelta(seconds=60))
        tasks.write_note.enqueue({"text": "later"}, run_at=timezone.now() + timedelta(minutes=5))
        assert received(listener) == []

        # A run_at already past is due.
        tasks.noop.enqueue({}, run_at=timezone.now() - timedelta(minutes=1))
        assert received(listener) == ["default"]


@pytest.mark.postgresql
def test_a_rolled_back_enqueue_sends_no_notification():
    with notifications() as listener:
        enqueue_and_roll_back()
        assert received(listener) == []
        assert not Job.objects.exists()


# SQLite: enqueues in the worker's own process.

sqlite_only = pytest.mark.skipif(
    connection.vendor == "postgresql", reason="PostgreSQL wakes workers by NOTIFY"
)


@pytest.fixture
def wakes() -> Iterator[list[str]]:
    """The wake-ups this process's workers receive, as they are sent."""
    seen: list[str] = []
    wakeups.subscribe(seen.append)
    yield seen
    wakeups.unsubscribe(seen.append)


@sqlite_only
def test_sqlite_an_idle_worker_is_woken_by_an_enqueue_in_its_process(idle_worker, claims, wakes):
    idle_worker()

    job = tasks.noop.enqueue({})

    assert wakes == ["default"]
    wait_until(lambda: succeeded(job), timeout=WAKE_TIMEOUT, what="the job to run")
    assert claims == [(2, 0), (2, 1)]


@sqlite_only
def test_sqlite_an_enqueue_in_a_transaction_wakes_workers_only_once_it_commits(
    idle_worker, claims, wakes
):
    idle_worker()

    with transaction.atomic():
        job = tasks.noop.enqueue({})
        tasks.write_note.enqueue_many([{"text": "a"}, {"text": "b"}])
        # Woken now, the worker would find nothing it can see, and sleep through the commit.
        assert wakes == []
        assert claims == [(2, 0)]

    assert sorted(wakes) == ["default", "emails"]
    wait_until(lambda: succeeded(job), timeout=WAKE_TIMEOUT, what="the job to run")
    wait_until(
        lambda: Job.objects.succeeded().count() == 3, timeout=WAKE_TIMEOUT, what="all to run"
    )


@sqlite_only
def test_sqlite_a_rolled_back_enqueue_wakes_no_worker(idle_worker, claims, wakes):
    idle_worker()

    enqueue_and_roll_back()

    assert wakes == []
    assert not Job.objects.exists()
    # Still idle: the next committed enqueue is the next wake-up.
    job = tasks.noop.enqueue({})
    assert wakes == ["default"]
    wait_until(lambda: succeeded(job), timeout=WAKE_TIMEOUT, what="the job to run")
    assert claims == [(2, 0), (2, 1)]
