"""ErrorBackoff: what a loop's run of database errors logs."""

import logging

from django.db import OperationalError

from django_outbox.db.outage import ErrorBackoff

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
