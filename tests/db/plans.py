"""Query plans on MariaDB, as text the plan tests can read."""

from __future__ import annotations

from typing import Any


def mariadb_plan(cursor: Any, sql: str, params: Any = ()) -> str:
    """EXPLAIN ``sql``: one line per table read, ``SCAN <table>`` where it reads every row
    (access type ALL), else ``<table> <access type> <index>``, then the plan's extra notes."""
    cursor.execute(f"EXPLAIN {sql}", params)
    names = [column[0].lower() for column in cursor.description]
    lines = []
    for row in cursor.fetchall():
        step = dict(zip(names, row, strict=True))
        if step["type"] == "ALL":
            lines.append(f"SCAN {step['table']} ({step['extra']})")
        else:
            lines.append(f"{step['table']} {step['type']} {step['key']} ({step['extra']})")
    return "\n".join(lines)
