"""Plain and full claims: keyed and dependent jobs are claimed by full claims only, promptly."""

import time

import pytest
from django.db import OperationalError, connection

from django_outbox.db import queries_for
from django_outbox.db.base import ClaimKind
from django_outbox.models import Job, JobStatus
from django_outbox.worker.claims import ClaimPolicy
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.postgresql
def test_a_plain_claim_leaves_keyed_and_dependent_jobs_to_a_full_one():
    plain = tasks.noop.enqueue()
    keyed = tasks.noop.enqueue(lock="k")
    parent = tasks.noop.enqueue(delay=3600)
    dependent = tasks.noop.enqueue(depends_on=parent)
    queries = queries_for(connection)
    assert queries.waiting_kinds(connection, None) == {ClaimKind.FULL}
    claimed = queries.claim(connection, "w", None, 10, 30, kind=ClaimKind.PLAIN)
    assert [job.id for job in claimed] == [plain.pk]
    claimed = queries.claim(connection, "w", None, 10, 30, kind=ClaimKind.FULL)
    assert [job.id for job in claimed] == [keyed.pk]
    # The dependent waits for its parent; a plain claim never takes it either way.
    assert Job.objects.get(pk=dependent.pk).status == JobStatus.READY
    assert queries.waiting_kinds(connection, None) == {ClaimKind.FULL}
    assert queries.waiting_kinds(connection, ["other"]) == set()


@pytest.mark.postgresql
def test_the_look_for_keyed_and_dependent_jobs_uses_its_partial_index():
    from django_outbox.db.postgresql.queries import WAITING_KINDS_SQL

    tasks.noop.enqueue_many([{} for _ in range(2000)])
    tasks.noop.enqueue(lock="k")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_job")
        cursor.execute("EXPLAIN " + WAITING_KINDS_SQL.format(queue_filter=""))
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
    policy = ClaimPolicy(every=0.2)
    assert policy.base() is ClaimKind.FULL
    policy.claimed(ClaimKind.FULL, claimed=3, limit=10)
    assert policy.base() is ClaimKind.PLAIN
    policy.claimed(ClaimKind.FULL, claimed=10, limit=10)
    assert policy.base() is ClaimKind.FULL
    policy.claimed(ClaimKind.FULL, claimed=0, limit=10)
    assert policy.base() is ClaimKind.PLAIN
    time.sleep(0.25)
    assert policy.base() is ClaimKind.FULL


def claim_round(policy, *, fair_waiting, others_waiting, limit=10):
    """One round of a worker's claims against a queue where each kind has jobs enough to fill
    any claim, or none; return the kinds that took jobs, in order."""
    claimed: list[str] = []

    def claim(kind, count):
        if fair_waiting if kind is ClaimKind.FAIR else others_waiting:
            claimed.append(kind.value)
            return count
        return 0

    def look():
        return {ClaimKind.FAIR} if fair_waiting else set()

    policy.claim_round(limit, claim, look)
    return claimed


def test_without_plain_claims_every_claim_of_jobs_that_are_not_fair_is_full():
    policy = ClaimPolicy(every=60, plain_claims=False)
    policy.claimed(ClaimKind.FULL, claimed=0, limit=10)
    assert policy.base() is ClaimKind.FULL
    assert claim_round(policy, fair_waiting=True, others_waiting=False) == ["fair"]
    assert claim_round(policy, fair_waiting=True, others_waiting=False) == ["fair"]
    assert claim_round(policy, fair_waiting=True, others_waiting=False) == ["fair"]


def test_fair_jobs_go_first_on_every_other_claim_while_both_kinds_fill_their_claims():
    policy = ClaimPolicy(every=60)
    rounds = [claim_round(policy, fair_waiting=True, others_waiting=True) for _ in range(5)]
    # The first round claims fully (keyed jobs unknown) and looks: fair jobs wait. (A full
    # claim that fills its batch is followed by another: more keyed jobs may wait.)
    assert rounds == [["full"], ["fair"], ["full"], ["fair"], ["full"]]
    plain_only = ClaimPolicy(every=60)
    plain_only.claimed(ClaimKind.FULL, claimed=0, limit=10)
    rounds = [claim_round(plain_only, fair_waiting=True, others_waiting=True) for _ in range(4)]
    assert rounds == [["plain"], ["fair"], ["plain"], ["fair"]]


def test_the_others_get_a_turn_once_per_interval_after_they_left_room():
    policy = ClaimPolicy(every=0.2, plain_claims=False)
    assert claim_round(policy, fair_waiting=True, others_waiting=False) == ["fair"]
    for _ in range(3):
        assert claim_round(policy, fair_waiting=True, others_waiting=True) == ["fair"]
    time.sleep(0.25)
    assert claim_round(policy, fair_waiting=True, others_waiting=True) == ["full"]
    assert claim_round(policy, fair_waiting=True, others_waiting=True) == ["fair"]


def test_fair_jobs_go_first_every_time_once_the_others_leave_room():
    policy = ClaimPolicy(every=60)
    rounds = [claim_round(policy, fair_waiting=True, others_waiting=False) for _ in range(5)]
    assert rounds == [["fair"], ["fair"], ["fair"], ["fair"], ["fair"]]


def test_an_idle_worker_looks_once_a_round_and_claims_nothing_else():
    policy = ClaimPolicy(every=60)
    for _ in range(3):
        assert claim_round(policy, fair_waiting=False, others_waiting=False) == []
        assert not policy.fair_first()


def test_without_fair_jobs_a_fair_claim_runs_once_per_interval_while_others_fill_claims():
    policy = ClaimPolicy(every=0.2)
    # The first round looks: no fair jobs.
    assert claim_round(policy, fair_waiting=False, others_waiting=True) == ["full"]
    assert not policy.fair_first()
    time.sleep(0.25)
    assert policy.fair_first()


def test_jobs_claimed_before_a_later_claim_of_the_round_fails_are_run(monkeypatch):
    jobs = [tasks.noop.enqueue() for _ in range(3)]
    queries = queries_for(connection)
    looks = []

    def failing_look(db, queues, excluded_queues=()):
        looks.append(queues)
        if len(looks) == 1:
            raise OperationalError("the look after the first claim failed")
        return set()

    monkeypatch.setattr(queries, "waiting_kinds", failing_look)
    run_worker(concurrency=4)
    assert len(looks) >= 1
    for job in jobs:
        job.refresh_from_db()
        # Run by the worker that claimed them, not taken back after their lease expired.
        assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)


def test_limited_jobs_go_first_while_they_fill_claims_and_the_others_found_none():
    policy = ClaimPolicy(every=0.2, plain_claims=False)
    order: list[str] = []
    waiting = {ClaimKind.LIMITED}

    def claim(kind, count):
        order.append(kind.value)
        return count if kind in waiting else 0

    def look():
        return set(waiting)

    def rounds(number):
        del order[:]
        for _ in range(number):
            policy.claim_round(10, claim, look)
            order.append("|")
        return " ".join(order)

    # The first round claims the others (none) and limited jobs; then limited jobs alone,
    # without an empty claim before them.
    assert rounds(3) == "full limited | limited | limited |"
    # Once per interval the others' claims come first again (fair ones too).
    time.sleep(0.25)
    assert rounds(2) == "fair full limited | limited |"
    # Others' jobs arrive: a limited claim that leaves room is followed by theirs, which
    # fill claims and go first from then on.
    waiting = {ClaimKind.FULL}
    assert rounds(3) == "limited full | full | full |"
