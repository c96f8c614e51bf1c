"""What the admin benchmark scripts in bench/ share: a scratch database and a stopwatch.

Each script (admin_search.py, admin_pages.py, dashboard.py) creates a database of its own,
points Django at it (the test settings, with this checkout on ``sys.path``), loads it, times
requests and drops it at the end unless --keep. Nothing here imports Django at import time:
``DATABASE_URL`` must be set before ``django.setup()`` reads the settings.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from django.test import Client

# The PostgreSQL server the scripts create their databases on; its database "postgres" is where
# they run CREATE and DROP DATABASE.
SERVER = "postgres://postgres@127.0.0.1:5432"

T = TypeVar("T")


def arguments_parser(description: str) -> argparse.ArgumentParser:
    """Return a parser with the options every script takes: --rows and --keep."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--rows", type=positive_int, default=1_000_000, help="How many jobs to load (1,000,000)."
    )
    parser.add_argument("--keep", action="store_true", help="Leave the database for a look.")
    return parser


def positive_int(text: str) -> int:
    """Parse a count of rows: a whole number above 0."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0.")
    return number


def use_database(url: str) -> None:
    """Point Django, once set up, at ``url`` with the test settings of this checkout."""
    top = str(Path(__file__).resolve().parent.parent)
    if top not in sys.path:
        sys.path.insert(0, top)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def server_command(sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    """Run ``sql`` on the server's database "postgres", outside a transaction (as CREATE
    DATABASE must be); return its first row, if it returns rows."""
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as connection:
        cursor = connection.execute(sql, params)
        return cursor.fetchone() if cursor.description is not None else None


def database_exists(name: str) -> bool:
    found = server_command("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
    return found is not None


@contextmanager
def scratch_postgresql(name: str, *, keep: bool, reuse: bool = False) -> Iterator[bool]:
    """Create the PostgreSQL database ``name`` afresh (dropping an older one) and point Django
    at it; drop it on the way out unless ``keep``.

    With ``reuse``, a database of that name that exists (one a --keep left) is used as it is.
    Yield whether the database was created empty, so needs loading.
    """
    use_database(f"{SERVER}/{name}")
    created = not (reuse and database_exists(name))
    if created:
        server_command(f"DROP DATABASE IF EXISTS {name}")
        server_command(f"CREATE DATABASE {name}")
    try:
        yield created
    finally:
        close_connections()
        if not keep:
            server_command(f"DROP DATABASE IF EXISTS {name}")


@contextmanager
def scratch_sqlite(path: Path, *, keep: bool, reuse: bool = False) -> Iterator[bool]:
    """Create the SQLite file ``path`` afresh (deleting an older one) and point Django at it;
    delete it on the way out unless ``keep``.

    With ``reuse``, a file that exists is used as it is. Yield whether the file was created
    empty, so needs loading.
    """
    path = path.resolve()
    use_database(f"sqlite:///{path}")
    created = not (reuse and path.exists())
    if created:
        path.parent.mkdir(parents=True, exist_ok=True)
        _delete_sqlite(path)
    try:
        yield created
    finally:
        close_connections()
        if not keep:
            _delete_sqlite(path)


def _delete_sqlite(path: Path) -> None:
    # The database and its journals (path-wal, path-shm, path-journal).
    for leftover in path.parent.glob(f"{path.name}*"):
        leftover.unlink()


def close_connections() -> None:
    """Close Django's connections, if Django was set up: the server refuses to drop a database
    with a session on it."""
    if "django.db" in sys.modules:
        from django.db import connections

        connections.close_all()


def set_up_django() -> None:
    """Set Django up and migrate the scratch database, in Django's test environment (so that
    the test client's responses carry their template context, which the scripts read)."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()
    call_command("migrate", verbosity=0)


def superuser_client() -> Client:
    """Return a test client logged in as the superuser "bench" (created unless a reused
    database has it), to request the admin as a browser would."""
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", password="bench"
    )
    client = Client()
    client.force_login(user)
    return client


def repeat(call: Callable[[], T], runs: int) -> tuple[list[float], list[T]]:
    """Call ``call`` once to warm up, then ``runs`` times; return the seconds of each timed
    call and what each returned."""
    call()
    seconds, results = [], []
    for _ in range(runs):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
        results.append(result)
    return seconds, results


def ms(seconds: float) -> str:
    """Format ``seconds`` as whole milliseconds, as the scripts' tables show them."""
    return f"{seconds * 1000:.0f}"


def server_version(connection: Any) -> str:
    """Return the database's name and version, such as "PostgreSQL 15.20 (Debian ...)"."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT 'SQLite ' || sqlite_version()")
            return str(cursor.fetchone()[0])
        cursor.execute("SELECT version()")
        return str(cursor.fetchone()[0].split(" on ")[0])


def machine() -> str:
    """Return the Python version, the number of cores and the architecture, for the record."""
    return f"Python {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}"
