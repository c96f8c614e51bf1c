"""The relay in a worker's thread: started with the worker, stopped with it."""

from __future__ import annotations

import pytest

from django_outbox import Message, publish
from django_outbox.relay.brokers import memory
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("memory_broker")]


def test_a_worker_relays_messages_in_a_thread(worker_thread):
    worker_thread(concurrency=1)
    publish("orders", {"n": 1}, key="k")
    publish("orders", {"n": 2}, key="k")
    wait_until(lambda: len(memory.sent_messages("default")) == 2, timeout=10)
    assert [m.body for m in memory.sent_messages("default")] == ['{"n": 1}', '{"n": 2}']
    wait_until(lambda: not Message.objects.exists(), timeout=5)


@pytest.mark.parametrize("options", [{"relay": False}, {"burst": True}])
def test_no_relay_without_asking_or_in_burst_workers(worker_thread, options):
    worker = worker_thread(concurrency=1, **options)
    assert worker._relay is None
