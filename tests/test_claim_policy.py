"""Plain and full claims: keyed and dependent jobs are claimed by full claims only, promptly."""

import time

import pytest
from django.db import connection

from django_outbox.claim_policy import ClaimPolicy
from django_outbox.db import queries_for
from django_outbox.models import Job, JobStatus
from tests.testapp import tasks

from .processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.postgresql
def test_a_plain_claim_leaves_keyed_and_dependent_jobs_to_a_full_one():
    plain = tasks.noop.enqueue()
    keyed = tasks.noop.enqueue(lock="k")
    parent = tasks.noop.enqueue(delay=3600)
    dependent = tasks.noop.enqueue(depends_on=parent)
    queries = queries_for(connection)
    assert queries.special_jobs_waiting(connection, None)
    claimed = queries.claim(connection, "w", None, 10, 30, full=False)
    assert [job.id for job in claimed] == [plain.pk]
    claimed = queries.claim(connection, "w", None, 10, 30, full=True)
    assert [job.id for job in claimed] == [keyed.pk]
    # The dependent waits for its parent; a plain claim never takes it either way.
    assert Job.objects.get(pk=dependent.pk).status == JobStatus.READY
    assert queries.special_jobs_waiting(connection, None)
    assert not queries.special_jobs_waiting(connection, ["other"])


@pytest.mark.postgresql
def test_the_look_for_keyed_and_dependent_jobs_uses_its_partial_index():
    from django_outbox.db.postgresql import SPECIAL_WAITING_SQL

    tasks.noop.enqueue_many([{} for _ in range(2000)])
    tasks.noop.enqueue(lock="k")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_job")
        cursor.execute("EXPLAIN " + SPECIAL_WAITING_SQL.format(queue_filter=""))
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "outbox_job_claim_special" in plan, plan


def test_an_idle_worker_claims_a_keyed_job_at_once(settings, worker_thread):
    # A poll long enough that only the wake-up and the short plain claim explain a prompt run.
    settings.OUTBOX = {**settings.OUTBOX, "POLL_SECONDS": 30}
    worker_thread(concurrency=2)
    time.sleep(0.3)  # Idle: its first claims found nothing.
    started = time.monotonic()
    job = tasks.noop.enqueue(lock="k")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=10)
    assert time.monotonic() - started < 5


def test_the_policy_claims_fully_at_start_after_a_full_batch_and_every_interval():
    policy = ClaimPolicy(full_every=0.2)
    assert policy.wants_full()
    policy.claimed_fully(claimed=3, limit=10)
    assert not policy.wants_full()
    policy.claimed_fully(claimed=10, limit=10)
    assert policy.wants_full()
    policy.claimed_fully(claimed=0, limit=10)
    assert not policy.wants_full()
    time.sleep(0.25)
    assert policy.wants_full()
