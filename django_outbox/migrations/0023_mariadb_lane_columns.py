"""MariaDB and MySQL: a generated column per claim lane in place of ``claim_lane``, so that a
job's claim and completion change fewer index entries.

InnoDB rewrites a secondary index's entry when one of its columns changes. The nine claim and
fair-round indexes all started with ``claim_lane`` (1, 2 or 3 for a claimable plain, fair or
limited job, NULL otherwise), so the claim of any job, which takes it out of its lane,
rewrote an entry in each of the nine. Now each lane has a column of its own, holding the
lane's number for a claimable job of the lane and NULL for every other job:

- ``plain_lane`` (1) leads ``outbox_job_claim_any`` and ``outbox_job_claim_queue``;
- ``fair_lane`` (2) leads the four fair indexes (``outbox_job_fair_*``);
- ``limited_lane`` (3) leads ``outbox_job_limited_any`` and ``outbox_job_limited_queue``;
- ``keyed_lane`` (2 or 3: a claimable fair or limited job) leads ``outbox_job_claim_special``,
  the workers' look for whether fair or limited jobs are due.

A plain job's claim rewrites two of the nine entries, a fair job's five, a limited job's three;
a completion none of them (a claimed job is in no lane). The columns are VIRTUAL: added and
dropped without copying the table, nothing stored in its rows. Nothing on PostgreSQL and
SQLite, whose partial indexes hold each lane's jobs alone.
"""

from django.db import migrations

from ._mysql import run_on_mysql

TABLE = "django_outbox_job"
CLAIMABLE = "status IN ('ready', 'retrying')"

#: Each lane's column: the lane's number for a claimable job of the lane, NULL otherwise.
LANE_COLUMNS = {
    "plain_lane": f"IF({CLAIMABLE} AND fair_key IS NULL AND limit_key IS NULL, 1, NULL)",
    "fair_lane": f"IF({CLAIMABLE} AND fair_key IS NOT NULL AND limit_key IS NULL, 2, NULL)",
    "limited_lane": f"IF({CLAIMABLE} AND limit_key IS NOT NULL, 3, NULL)",
    "keyed_lane": (
        f"CASE WHEN {CLAIMABLE} THEN "
        "CASE WHEN limit_key IS NOT NULL THEN 3 WHEN fair_key IS NOT NULL THEN 2 END END"
    ),
}

#: The claim and fair-round indexes: each one's lane column, and the columns after it.
INDEXES = {
    "outbox_job_claim_any": ("plain_lane", "priority DESC, run_at, id"),
    "outbox_job_claim_queue": ("plain_lane", "queue, priority DESC, run_at, id"),
    "outbox_job_fair_any": ("fair_lane", "priority DESC, fair_round, id"),
    "outbox_job_fair_queue": ("fair_lane", "queue, priority DESC, fair_round, id"),
    "outbox_job_fair_round": ("fair_lane", "queue, fair_round"),
    "outbox_job_fair_key": ("fair_lane", "queue, fair_key, fair_round"),
    "outbox_job_claim_special": ("keyed_lane", "run_at"),
    "outbox_job_limited_any": ("limited_lane", "priority DESC, fair_round, run_at, id"),
    "outbox_job_limited_queue": ("limited_lane", "queue, priority DESC, fair_round, run_at, id"),
}

#: ``claim_lane`` as migration 0019 left it.
CLAIM_LANE = f"""CASE WHEN {CLAIMABLE} THEN
    CASE WHEN limit_key IS NOT NULL THEN 3 WHEN fair_key IS NULL THEN 1 ELSE 2 END
END"""


def _rebuilt_indexes(lane_column: dict[str, str]) -> str:
    """One ALTER TABLE that builds each index of ``INDEXES`` again, led by the column
    ``lane_column`` names for its lane column: one pass over the table for all nine."""
    changes = []
    for name, (column, rest) in INDEXES.items():
        changes += [f"DROP INDEX {name}", f"ADD INDEX {name} ({lane_column[column]}, {rest})"]
    return f"ALTER TABLE {TABLE} " + ", ".join(changes)


CREATE = [
    f"ALTER TABLE {TABLE} "
    + ", ".join(
        f"ADD COLUMN {column} TINYINT AS ({expression}) VIRTUAL"
        for column, expression in LANE_COLUMNS.items()
    ),
    _rebuilt_indexes({column: column for column in LANE_COLUMNS}),
    f"ALTER TABLE {TABLE} DROP COLUMN claim_lane",
]

DROP = [
    f"ALTER TABLE {TABLE} ADD COLUMN claim_lane TINYINT AS ({CLAIM_LANE}) VIRTUAL",
    _rebuilt_indexes(dict.fromkeys(LANE_COLUMNS, "claim_lane")),
    f"ALTER TABLE {TABLE} " + ", ".join(f"DROP COLUMN {column}" for column in LANE_COLUMNS),
]


class Migration(migrations.Migration):
    # DDL: MariaDB commits at each statement, and Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [
        ("django_outbox", "0022_admin_task_index"),
    ]

    operations = [
        run_on_mysql(CREATE, DROP),
    ]
