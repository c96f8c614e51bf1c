"""The bench's own tables: models built at run time, created for a run and dropped after it.

Not in any app's migrations: the bench must not leave tables behind in a project's database.
The worker processes the bench starts build the same models (``effect_model``) when a handler
first writes one.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from django.db import connections, models

from django_outbox.models import Job

APP_LABEL = "outbox_bench"


def _model(name: str, table: str, fields: dict[str, models.Field[Any, Any]]) -> type[models.Model]:
    attributes: dict[str, Any] = {
        "__module__": __name__,
        "Meta": type("Meta", (), {"app_label": APP_LABEL, "db_table": table}),
        **fields,
    }
    return type(name, (models.Model,), attributes)


@functools.cache
def bare_row_model() -> type[models.Model]:
    """A model with the job table's columns and no index, trigger or check beyond its key."""
    return _model(
        "BenchRow",
        "outbox_bench_row",
        {job_field.name: job_field.clone() for job_field in Job._meta.local_fields},
    )


@functools.cache
def effect_model() -> type[models.Model]:
    """What an atomic bench job writes: one small row, as a handler records its effect."""
    return _model(
        "BenchEffect",
        "outbox_bench_effect",
        {"id": models.BigAutoField(primary_key=True), "job_id": models.BigIntegerField()},
    )


@contextlib.contextmanager
def created(model: type[models.Model], using: str) -> Iterator[type[models.Model]]:
    """Create ``model``'s table (dropping a leftover first) for the duration of the block."""
    connection = connections[using]
    # Looked for before the schema editor's transaction, which then begins with a write: on
    # SQLite a transaction that reads first cannot take the write lock once another connection
    # (a bench worker's heartbeat) has committed since, and fails at once, whatever the timeout.
    leftover = model._meta.db_table in connection.introspection.table_names()
    with connection.schema_editor() as editor:
        if leftover:
            editor.delete_model(model)
        editor.create_model(model)
    try:
        yield model
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(model)
