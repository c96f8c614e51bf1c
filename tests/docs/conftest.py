"""The docs' examples run as the quick start sets a project up."""

from collections.abc import Iterator

import pytest
from django.db import connection


@pytest.fixture(autouse=True)
def sqlite_transactions_take_the_write_lock_when_they_begin() -> Iterator[None]:
    """On SQLite, ``OPTIONS["transaction_mode"] = "IMMEDIATE"``, as docs/quickstart.md sets it
    (and example_project): the pages show what a project set up so sees. Begun deferred, a job
    that read and then wrote ran again within its attempt when another connection wrote in
    between, as docs/databases.md says (the README's example then sent two emails, in a third
    of its runs here)."""
    if connection.vendor != "sqlite":
        yield
        return
    options = connection.settings_dict.setdefault("OPTIONS", {})
    before = options.get("transaction_mode")
    options["transaction_mode"] = "IMMEDIATE"
    # Connections read the mode when they connect: this thread's, and the workers' new ones.
    connection.close()
    try:
        yield
    finally:
        if before is None:
            options.pop("transaction_mode", None)
        else:
            options["transaction_mode"] = before
        connection.close()
