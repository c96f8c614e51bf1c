"""Fault injection: a worker cut off from PostgreSQL by the network, not by the server.

The worker runs as another host would, in a network namespace that reaches a private
PostgreSQL through a veth pair only (``partitions.py``). Mid-drain the link goes down (the
kernel knows, and says so) or drops every packet (the half-open case: nobody says anything),
for less and for more than the lease. A second worker outside the namespace keeps running.
Whatever happens: no job is lost, no atomic job's write commits twice, each rerun of an
``atomic=False`` job is a taken-back attempt, and the cut-off worker runs jobs again once the
link is back (its TCP keepalives and ``tcp_user_timeout`` end a dead connection).
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.chaos.outcomes import report, scaled
from tests.chaos.partitions import PartitionedDatabase, partitioned_database
from tests.processes import wait_until

__all__ = ["partitioned_database"]

# On the suite's PostgreSQL leg only: the test runs on a server of its own whatever database
# the suite uses, and would only repeat itself on the others.
pytestmark = [pytest.mark.chaos, pytest.mark.process, pytest.mark.postgresql]

LEASE = {"OUTBOX_TEST_LEASE_SECONDS": "4", "OUTBOX_TEST_HEARTBEAT_SECONDS": "1"}
TABLE = "django_outbox_job"
AFTER_HEAL = "after-heal"


def enqueue(database: PartitionedDatabase, count: int, sleep: float) -> None:
    database.query(f"TRUNCATE {TABLE}, testapp_note CASCADE")
    database.manage(
        "shell",
        "-c",
        "from tests.testapp import tasks; "
        f"tasks.chaos_atomic.enqueue_many([{{'sleep': {sleep}}}] * {count}); "
        f"tasks.chaos_non_atomic.enqueue_many([{{'sleep': {sleep}}}] * {count})",
    )


def outcomes(database: PartitionedDatabase) -> dict[str, int]:
    """Assert nothing was lost and no atomic write committed twice; count the reruns."""
    statuses = dict(database.query(f"SELECT status, count(*) FROM {TABLE} GROUP BY status"))
    assert set(statuses) == {"succeeded"}, statuses
    rows = database.query(
        f"SELECT job.id, job.task_name, job.attempts, count(note.id) FROM {TABLE} AS job "
        "LEFT JOIN testapp_note AS note ON note.job_id = job.id GROUP BY job.id"
    )
    duplicates = 0
    for job_id, task_name, attempts, runs in rows:
        if task_name.endswith("chaos_atomic"):
            assert runs == 1, (job_id, runs)
        else:
            assert 1 <= runs <= attempts, (job_id, runs, attempts)
            duplicates += runs - 1
    return {
        "jobs": len(rows),
        "non_atomic_reruns": duplicates,
        "jobs_retaken": sum(1 for row in rows if row[2] > 1),
    }


def succeeded_by(database: PartitionedDatabase, worker_id: str) -> int:
    return int(
        database.query(
            f"SELECT count(*) FROM {TABLE} WHERE status = 'succeeded' AND worker_id = %s",
            [worker_id],
        )[0][0]
    )


@pytest.mark.parametrize(
    ("fault", "seconds"),
    [
        # Shorter than the 4 s lease, and longer; a drop longer than tcp_user_timeout (15 s).
        ("cut", 2),
        ("cut", 12),
        ("drop", 2),
        ("drop", 30),
    ],
)
def test_a_worker_cut_off_by_the_network_loses_nothing_and_recovers(
    partitioned_database, workers, fault, seconds
):
    database = partitioned_database
    per_task = scaled(30, 150)
    enqueue(database, per_task, sleep=0.5)
    partitioned = workers(
        "--worker-id",
        "partitioned",
        "--concurrency",
        "4",
        prefix=database.prefix,
        **database.env(database.remote_url, **LEASE),
    )
    outside = workers(
        "--worker-id",
        "outside",
        "--concurrency",
        "4",
        "--exclude-queue",
        AFTER_HEAL,
        **database.env(database.local_url, **LEASE),
    )
    wait_until(
        lambda: succeeded_by(database, "partitioned") >= 4,
        timeout=60,
        what="the partitioned worker to run jobs",
    )
    getattr(database, fault)()
    time.sleep(seconds)
    database.heal()
    healed = time.monotonic()
    before = succeeded_by(database, "partitioned")
    # More jobs after the heal, so that there is work for the cut-off worker to come back to,
    # in a queue the other worker leaves alone: it would otherwise drain them (a few seconds)
    # before the cut-off worker's error backoff ends, and the test would wait for nothing.
    database.manage(
        "shell",
        "-c",
        "from tests.testapp import tasks; "
        f"tasks.chaos_atomic.using(queue={AFTER_HEAL!r})"
        f".enqueue_many([{{'sleep': 0.5}}] * {per_task})",
    )
    wait_until(
        lambda: succeeded_by(database, "partitioned") > before,
        timeout=90,
        what="the partitioned worker to run jobs again",
    )
    recovered_after = time.monotonic() - healed
    # Within its error backoff of the heal: a connection left waiting on retransmissions
    # (no tcp_user_timeout) comes back only at the kernel's next retry, which after 30 s of
    # silence is 51 s after the first lost packet.
    assert recovered_after < 30, recovered_after
    wait_until(
        lambda: not database.query(f"SELECT 1 FROM {TABLE} WHERE status <> 'succeeded' LIMIT 1"),
        timeout=scaled(120, 300),
        what="every job to succeed",
    )
    for process in (partitioned, outside):
        process.send(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, process.stderr
    figures = outcomes(database)
    report(
        "partition",
        fault=fault,
        seconds=seconds,
        lease_seconds=4,
        recovered_after=round(recovered_after, 1),
        **figures,
    )
