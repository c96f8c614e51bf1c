"""What the MariaDB and MySQL migrations share: statements run on those databases alone.

Not a migration (Django's loader skips modules whose names start with an underscore).
"""

from collections.abc import Sequence
from typing import Any

from django.db import migrations


def _on_mysql(statements: Sequence[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "mysql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


def run_on_mysql(create: Sequence[str], drop: Sequence[str]) -> migrations.RunPython:
    """Run ``create`` on MariaDB and MySQL (``drop`` when migrating back); nothing elsewhere."""
    return migrations.RunPython(_on_mysql(create), _on_mysql(drop))
