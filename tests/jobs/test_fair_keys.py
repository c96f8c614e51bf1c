"""enqueue(fair_key=...): the keys of a queue are served in turn.

The worked examples are those of clj-queue-by, whose scheduling fair keys follow.
"""

import threading

import pytest
from django.db import IntegrityError, close_old_connections, connection, transaction

from django_outbox import EnqueueError
from django_outbox.db import queries_for
from django_outbox.db.base import ClaimKind
from django_outbox.models import Job, JobStatus
from django_outbox.testing import run_jobs
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def push(name, data):
    """Enqueue a fair job whose key is ``name``."""
    return tasks.noop.enqueue({"name": name, "data": data}, fair_key=name)


def pull():
    """Claim one fair job as a worker does (it stays running): its key and data, or None."""
    claimed = queries_for(connection).claim(connection, "w", None, 1, 30, kind=ClaimKind.FAIR)
    if not claimed:
        return None
    payload = Job.objects.get(pk=claimed[0].id).payload
    return payload["name"], payload["data"]


def test_the_first_worked_example_bobs_item_overtakes_alices_second():
    push("alice", 1)
    push("alice", 2)
    push("alice", 3)
    push("bob", "x")
    pulled = [pull() for _ in range(5)]
    assert pulled == [("alice", 1), ("bob", "x"), ("alice", 2), ("alice", 3), None]


def test_the_second_worked_example_items_pushed_after_a_pull_come_after_the_snapshot():
    push("alice", 1)
    push("bob", "x")
    assert pull() == ("alice", 1)
    push("alice", 2)
    push("alice", 3)
    assert [pull() for _ in range(3)] == [("bob", "x"), ("alice", 2), ("alice", 3)]


def test_the_last_worked_example_bobs_new_item_overtakes_alices_larger_queue():
    push("alice", 1)
    push("bob", "x")
    push("alice", 2)
    assert pull() == ("alice", 1)
    push("alice", 3)
    push("alice", 4)
    assert pull() == ("bob", "x")
    push("bob", "y")
    pulled = [pull() for _ in range(4)]
    assert pulled == [("alice", 2), ("bob", "y"), ("alice", 3), ("alice", 4)]


def test_a_new_key_starts_within_the_next_claim_batch_behind_a_backlog_of_10000():
    tasks.noop.enqueue_many([{"n": n} for n in range(10_000)], fair_key="big")
    newcomer = tasks.noop.enqueue({"n": "new"}, fair_key="small")
    claimed = queries_for(connection).claim(connection, "w", None, 10, 30, kind=ClaimKind.FAIR)
    assert newcomer.pk in [job.id for job in claimed]
    # The backlog's first job went first: it was at the head when the newcomer came.
    assert claimed[0].id == Job.objects.filter(fair_key="big").earliest("pk").pk


def test_keys_take_turns_one_job_each():
    for key, count in [("a", 4), ("b", 3), ("c", 1)]:
        tasks.records_order.enqueue_many(
            [{"label": f"{key}{n}"} for n in range(1, count + 1)], fair_key=key
        )
    # One job a claim: the jobs of one claim run in the order the database returned them, not
    # by their keys' turns (an "auto" prefetch would claim two at once after a few jobs).
    run_worker(concurrency=1, prefetch=0)
    order = list(Note.objects.order_by("pk").values_list("text", flat=True))
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3", "b3", "a4"]


def test_run_jobs_serves_keys_in_turn_as_a_worker_does():
    for label in ["a1", "a2", "a3"]:
        tasks.records_order.enqueue({"label": label}, fair_key="a")
    tasks.records_order.enqueue({"label": "b1"}, fair_key="b")
    run_jobs()
    assert list(Note.objects.order_by("pk").values_list("text", flat=True)) == [
        "a1",
        "b1",
        "a2",
        "a3",
    ]


def test_priority_comes_before_the_round():
    tasks.noop.enqueue_many([{}] * 3, fair_key="a")
    urgent = tasks.noop.enqueue({}, fair_key="a", priority=5)
    claimed = queries_for(connection).claim(connection, "w", None, 1, 30, kind=ClaimKind.FAIR)
    assert [job.id for job in claimed] == [urgent.pk]


def test_a_retrying_job_keeps_its_round():
    first = tasks.noop.enqueue({}, fair_key="a")
    tasks.noop.enqueue_many([{}] * 3, fair_key="a")
    tasks.noop.enqueue_many([{}] * 3, fair_key="b")
    Job.objects.filter(pk=first.pk).update(status=JobStatus.RETRYING)
    claimed = queries_for(connection).claim(connection, "w", None, 1, 30, kind=ClaimKind.FAIR)
    assert [job.id for job in claimed] == [first.pk]


def test_a_key_with_nothing_waiting_joins_the_round_being_served():
    tasks.noop.enqueue_many([{}] * 5, fair_key="a")
    claim = queries_for(connection).claim
    claim(connection, "w", None, 3, 30, kind=ClaimKind.FAIR)
    # a's 4th job is next: a new key's first job is served with it, not after a's backlog.
    late = tasks.noop.enqueue({}, fair_key="late")
    assert late.fair_round == Job.objects.filter(fair_key="a").order_by("pk")[3].fair_round


def test_rounds_are_per_queue():
    tasks.noop.enqueue_many([{}] * 5, fair_key="a", queue="one")
    other = tasks.noop.enqueue({}, fair_key="a", queue="two")
    assert other.fair_round == 0


def test_a_batch_of_one_key_takes_consecutive_rounds_after_its_waiting_jobs():
    tasks.noop.enqueue_many([{}] * 2, fair_key="a")
    jobs = tasks.noop.enqueue_many([{}] * 3, fair_key="a")
    assert [job.fair_round for job in jobs] == [2, 3, 4]
    assert list(Job.objects.filter(pk__in=jobs.ids).values_list("fair_round", flat=True)) == [
        4,
        3,
        2,
    ]


def test_unfair_and_fair_jobs_of_one_queue_both_make_progress():
    tasks.records_order.enqueue_many([{"label": f"plain{n}"} for n in range(30)])
    tasks.records_order.enqueue_many([{"label": f"fair{n}"} for n in range(30)], fair_key="k")
    run_worker(concurrency=1, prefetch=0)
    order = list(Note.objects.order_by("pk").values_list("text", flat=True))
    assert len(order) == 60
    first_half = order[:30]
    # Claims alternate between the kinds while both fill them: neither waits for the other.
    assert sum(label.startswith("fair") for label in first_half) >= 10
    assert sum(label.startswith("plain") for label in first_half) >= 10


def test_concurrent_enqueuers_of_one_key_take_different_rounds():
    barrier = threading.Barrier(4)
    errors = []

    def enqueue_some():
        try:
            barrier.wait(5)
            for _ in range(5):
                with transaction.atomic():
                    tasks.noop.enqueue({}, fair_key="shared")
        except Exception as error:
            errors.append(error)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=enqueue_some) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    rounds = Job.objects.filter(fair_key="shared").order_by("fair_round")
    assert list(rounds.values_list("fair_round", flat=True)) == list(range(20))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fair_key": ""}, "fair_key must be a non-empty string"),
        ({"fair_key": 7}, "fair_key must be a non-empty string"),
        ({"fair_key": "x" * 256}, "at most 255 characters"),
        ({"fair_key": "a\x00b"}, "fair_key"),
        ({"fair_key": "a", "lock": "b"}, "lock or fair_key, not both"),
    ],
)
def test_a_bad_fair_key_is_a_clear_error_and_writes_nothing(options, message):
    with pytest.raises(EnqueueError, match=message):
        tasks.noop.enqueue({}, **options)
    with pytest.raises(EnqueueError, match=message):
        tasks.noop.enqueue_many([{}], **options)
    assert not Job.objects.exists()


def test_a_fair_job_cannot_depend_on_another():
    parent = tasks.noop.enqueue({})
    with pytest.raises(EnqueueError, match="depends_on or fair_key"):
        tasks.noop.enqueue({}, fair_key="a", depends_on=parent)
    assert Job.objects.count() == 1


def test_the_table_refuses_a_fair_row_without_a_round():
    job = tasks.noop.enqueue({}, fair_key="a")
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(fair_round=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(lock_key="k")
