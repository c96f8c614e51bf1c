"""Query plans on MariaDB, as text the plan tests can read."""

from __future__ import annotations

from typing import Any


def mariadb_plan(cursor: Any, sql: str, params: Any = (), *, run: bool = False) -> str:
    """EXPLAIN ``sql``: one line per table read, ``SCAN <table>`` where it reads every row
    (access type ALL), else ``<table> <access type> <index>``, then the plan's extra notes and
    the rows it expects to read.

    ``run``: ANALYZE instead, which runs the statement: the rows it read (``r_rows``, per
    lookup), not the optimizer's estimate (which ignores a LIMIT).
    """
    cursor.execute(f"{'ANALYZE' if run else 'EXPLAIN'} {sql}", params)
    names = [column[0].lower() for column in cursor.description]
    lines = []
    for row in cursor.fetchall():
        step = dict(zip(names, row, strict=True))
        rows = step["r_rows"] if run else step["rows"]
        if step["type"] == "ALL":
            lines.append(f"SCAN {step['table']} ({step['extra']}) rows={rows}")
        else:
            lines.append(
                f"{step['table']} {step['type']} {step['key']} ({step['extra']}) rows={rows}"
            )
    return "\n".join(lines)
