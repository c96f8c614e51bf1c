"""job_enqueued, worker_started and worker_stopped."""

import pytest
from django.db import transaction

from django_outbox import EnqueueError, signals
from django_outbox.models import Job
from django_outbox.worker.loop import Worker
from tests.helpers import run_worker
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def received():
    seen = []
    handlers = {}
    for name in ("job_enqueued", "worker_started", "worker_stopped"):

        def receive(sender, name=name, **kwargs):
            seen.append((name, sender, kwargs))

        handlers[name] = receive
        getattr(signals, name).connect(receive)
    yield seen
    for name, receive in handlers.items():
        getattr(signals, name).disconnect(receive)


def test_job_enqueued_is_sent_for_each_job_inside_the_callers_transaction(received):
    with transaction.atomic():
        job = tasks.noop.enqueue({"n": 1})
        # Sent before the commit: the job is in the caller's (open) transaction.
        assert [(name, sender, kwargs["job"].pk) for name, sender, kwargs in received] == [
            ("job_enqueued", tasks.noop, job.pk)
        ]
        many = tasks.noop.enqueue_many([{"n": 2}, {"n": 3}])
    assert [kwargs["job"].pk for _, _, kwargs in received] == [job.pk, *many.ids]


def test_a_duplicate_or_a_refused_enqueue_sends_nothing(received):
    tasks.noop.enqueue(unique_key="k")
    tasks.noop.enqueue(unique_key="k")
    with pytest.raises(EnqueueError, match="delay"):
        tasks.noop.enqueue(delay=-1)
    assert len(received) == 1
    assert Job.objects.count() == 1


def test_a_receiver_that_raises_does_not_break_the_enqueue(caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.job_enqueued.connect(broken)
    try:
        job = tasks.noop.enqueue()
    finally:
        signals.job_enqueued.disconnect(broken)
    assert Job.objects.filter(pk=job.pk).exists()
    assert "a signal receiver failed" in caplog.text


def test_a_worker_announces_its_start_and_its_stop(received):
    tasks.noop.enqueue()
    received.clear()
    stats = run_worker()
    names = [name for name, _, _ in received]
    assert names == ["worker_started", "worker_stopped"]
    started, stopped = received
    assert started[1] is Worker
    assert stopped[2]["worker"] is started[2]["worker"]
    assert stopped[2]["stats"] is stats
    assert stats.claimed == 1
