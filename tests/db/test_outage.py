"""ErrorBackoff: what a loop's run of database errors logs."""

import logging

import pytest
from django.db import OperationalError, connection, transaction

from django_outbox.db.outage import ErrorBackoff
from tests.testapp import tasks

logger = logging.getLogger("tests.outage")


def test_a_locked_database_is_a_warning_without_a_traceback(caplog):
    # SQLite's "database is locked" is contention (another connection holds the write lock):
    # on a fresh SQLite project it came as an ERROR with a forty-line traceback.
    backoff = ErrorBackoff("registering the worker", logger, first_delay=1)
    with caplog.at_level(logging.WARNING, logger="tests.outage"):
        backoff.failed(OperationalError("database is locked"))
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert "database is locked" in record.getMessage()


def test_another_database_error_is_an_error_with_its_traceback(caplog):
    backoff = ErrorBackoff("registering the worker", logger, first_delay=1)
    try:
        raise OperationalError("server closed the connection unexpectedly")
    except OperationalError as exc:
        error = exc
    with caplog.at_level(logging.WARNING, logger="tests.outage"):
        backoff.failed(error)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's lock timeout")
def test_a_lock_timeout_on_postgresql_is_a_warning_without_a_traceback(caplog, second_connection):
    # Two workers' claims creating the same per-key limit's row: one waits for the other's
    # insert, past the worker's bound on lock waits. It came as an ERROR with a traceback.
    job = tasks.noop.enqueue({})
    second_connection.ensure_connection()
    holder = second_connection.connection
    holder.execute("BEGIN")
    holder.execute("SELECT id FROM django_outbox_job WHERE id = %s FOR UPDATE", [job.pk])
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '50ms'")
            with pytest.raises(OperationalError) as caught, transaction.atomic():
                cursor.execute("UPDATE django_outbox_job SET priority = 7 WHERE id = %s", [job.pk])
    finally:
        holder.execute("ROLLBACK")
    backoff = ErrorBackoff("claiming jobs", logger, first_delay=1)
    with caplog.at_level(logging.WARNING, logger="tests.outage"):
        backoff.failed(caught.value)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert "lock timeout" in record.getMessage()
