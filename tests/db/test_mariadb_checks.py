"""MariaDB: the database's system checks (a version, an isolation level, a time zone)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.db import connection, connections

from django_outbox.checks import check_outbox_database
from tests.helpers import REPO
from tests.processes import worker_env

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's checks"),
]


def ids() -> list[str | None]:
    return [message.id for message in check_outbox_database(databases=["default"])]


@pytest.fixture
def version(monkeypatch: pytest.MonkeyPatch):
    """Make the connection report another server version."""

    wrapper = connections["default"]

    def set_version(version: tuple[int, ...], mariadb: bool = True) -> None:
        wrapper.ensure_connection()
        # Cached properties of the connection: set on the instance, they win.
        monkeypatch.setitem(wrapper.__dict__, "mysql_version", version)
        monkeypatch.setitem(wrapper.__dict__, "mysql_is_mariadb", mariadb)

    return set_version


def test_the_suites_database_passes():
    assert ids() == [] or ids() == ["django_outbox.W051"]  # W051 before MariaDB 10.8


def test_the_checks_run_only_for_the_outboxs_database_when_asked():
    assert check_outbox_database(databases=None) == []
    assert check_outbox_database(databases=["other"]) == []


@pytest.mark.parametrize(
    ("server", "mariadb"), [((10, 5, 22), True), ((10, 3, 0), True), ((5, 7, 44), False)]
)
def test_servers_without_skip_locked_are_refused(version, server, mariadb):
    version(server, mariadb)
    (message,) = check_outbox_database(databases=["default"])
    assert message.id == "django_outbox.E050"
    assert ".".join(map(str, server)) in message.msg
    assert "10.6" in message.msg if mariadb else "8.0" in message.msg


def test_mariadb_before_10_8_is_warned_of_its_ascending_claim_indexes(version):
    version((10, 6, 19))
    assert "django_outbox.W051" in ids()
    version((10, 11, 9))
    assert "django_outbox.W051" not in ids()


def test_repeatable_read_is_refused_with_how_to_set_read_committed():
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    try:
        (message,) = [m for m in check_outbox_database(databases=["default"]) if m.level >= 40]
        assert message.id == "django_outbox.E051"
        assert "REPEATABLE-READ" in message.msg
        assert message.hint
        assert '"isolation_level": "read committed"' in message.hint
    finally:
        connection.close()


def test_a_session_time_zone_other_than_utc_is_warned_of():
    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+02:00'")
    try:
        messages = check_outbox_database(databases=["default"])
        (warning,) = [m for m in messages if m.id == "django_outbox.W050"]
        assert "+7200 seconds" in warning.msg
        assert warning.hint
        assert "SET time_zone = '+00:00'" in warning.hint
    finally:
        connection.close()


def test_manage_py_check_with_the_database_reports_the_isolation_level():
    env = worker_env()
    code = (
        "import django, os;"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings';"
        "from tests import settings;"
        "settings.DATABASES['default'].setdefault('OPTIONS', {})"
        "['isolation_level'] = 'repeatable read';"
        "django.setup();"
        "from django.core.management import call_command;"
        "call_command('check', databases=['default'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "django_outbox.E051" in result.stderr


def test_the_worker_refuses_to_start_on_an_error(version):
    version((10, 5, 0))
    with pytest.raises(Exception, match="E050"):
        call_command("run_outbox_worker", "--burst", stdout=io.StringIO(), stderr=io.StringIO())
