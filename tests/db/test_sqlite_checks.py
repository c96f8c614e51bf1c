"""SQLite: the database's system check on how its transactions begin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.checks import run_checks
from django.db import connection
from django.test import override_settings

from django_outbox.checks import check_outbox_database

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's check")


@pytest.fixture
def transaction_mode() -> Iterator[dict[str, object]]:
    """The connection's OPTIONS, to set ``transaction_mode`` in; put back afterwards."""
    options = connection.settings_dict.setdefault("OPTIONS", {})
    before = dict(options)
    yield options
    options.clear()
    options.update(before)


def ids() -> list[str | None]:
    return [message.id for message in check_outbox_database(databases=["default"])]


@pytest.mark.parametrize("mode", [None, "DEFERRED", "deferred"])
def test_transactions_begun_deferred_are_warned_of(transaction_mode, mode):
    transaction_mode.pop("transaction_mode", None)
    if mode is not None:
        transaction_mode["transaction_mode"] = mode
    [warning] = check_outbox_database(databases=["default"])
    assert warning.id == "django_outbox.W052"
    assert "runs again within its attempt" in warning.msg
    assert 'DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"' in str(warning.hint)


@pytest.mark.parametrize("mode", ["IMMEDIATE", "immediate", "EXCLUSIVE"])
def test_transactions_that_take_the_write_lock_when_they_begin_pass(transaction_mode, mode):
    transaction_mode["transaction_mode"] = mode
    assert ids() == []


@pytest.mark.django_db
@override_settings(SILENCED_SYSTEM_CHECKS=[])
def test_the_warning_is_among_the_database_checks_django_runs(transaction_mode):
    transaction_mode.pop("transaction_mode", None)
    found = run_checks(tags=["database"], databases=["default"])
    assert "django_outbox.W052" in [message.id for message in found]
    # Not without the database tag: "manage.py check" alone does not connect.
    assert "django_outbox.W052" not in [message.id for message in run_checks()]
