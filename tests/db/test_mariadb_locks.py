"""MariaDB: lock wait timeouts and deadlocks are busy, not broken, and the worker's own writes
retry them; enqueuers that check first wait for each other on row locks."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction

from django_outbox.db import is_lock_error, queries_for, retry_while_locked
from django_outbox.models import Job, JobStatus
from tests.testapp import tasks

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's lock errors"),
]


def hold_row_lock(other, job_id: int, seconds: float) -> threading.Thread:
    """Lock the row of ``job_id`` on ``other``'s driver connection for ``seconds``."""
    other.ensure_connection()
    raw = other.connection
    cursor = raw.cursor()
    cursor.execute("START TRANSACTION")
    cursor.execute("SELECT id FROM django_outbox_job WHERE id = %s FOR UPDATE", [job_id])

    def release() -> None:
        time.sleep(seconds)
        cursor.execute("ROLLBACK")
        cursor.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_a_lock_wait_timeout_is_a_lock_error_and_retried_until_the_lock_is_gone(
    second_connection,
):
    job = tasks.noop.enqueue({})
    releaser = hold_row_lock(second_connection, job.pk, 2.5)
    queries = queries_for(connection)
    tries = []

    def update() -> int:
        tries.append(time.monotonic())
        with queries.lock_wait(connection, 1):
            return Job.objects.filter(pk=job.pk).update(priority=7)

    try:
        with pytest.raises(OperationalError) as caught:
            update()
        assert caught.value.args[0] == 1205
        assert is_lock_error(caught.value)
        assert retry_while_locked(update) == 1
    finally:
        releaser.join()
    assert len(tries) >= 2
    assert Job.objects.get(pk=job.pk).priority == 7


def test_a_deadlock_is_a_lock_error(second_connection):
    first, second = tasks.noop.enqueue({}), tasks.noop.enqueue({})
    second_connection.ensure_connection()
    other = second_connection.connection.cursor()
    other.execute("START TRANSACTION")
    other.execute("SELECT id FROM django_outbox_job WHERE id = %s FOR UPDATE", [second.pk])
    errors: list[BaseException] = []

    def other_takes_first() -> None:
        try:
            other.execute("SELECT id FROM django_outbox_job WHERE id = %s FOR UPDATE", [first.pk])
        except Exception as exc:
            errors.append(exc)
        finally:
            other.execute("ROLLBACK")

    thread = threading.Thread(target=other_takes_first)
    try:
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=first.pk)
            thread.start()
            time.sleep(0.5)  # the other waits for the row this transaction holds
            Job.objects.select_for_update().get(pk=second.pk)
    except OperationalError as exc:
        errors.append(exc)
    finally:
        thread.join(30)
        other.close()
    # InnoDB rolls back one of the two: whichever it was, it reports 1213.
    (deadlock,) = errors
    assert deadlock.args[0] == 1213
    if isinstance(deadlock, OperationalError):
        assert is_lock_error(deadlock)


def test_unique_key_enqueuers_wait_for_each_other_on_a_row_lock(second_connection):
    """The second enqueuer waits for the first one's transaction, then sees its job."""
    results: dict[str, Any] = {}
    started = threading.Event()

    def first() -> None:
        try:
            with transaction.atomic():
                results["first"] = tasks.noop.enqueue({}, unique_key="k")
                started.set()
                time.sleep(1.0)
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    started.wait(10)
    second = tasks.noop.enqueue({}, unique_key="k")
    thread.join(10)
    assert second.is_duplicate
    assert second.pk == results["first"].pk
    assert Job.objects.filter(unique_key="k", status=JobStatus.READY).count() == 1
