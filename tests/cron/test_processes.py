"""Worker processes started together enqueue a cron tick once, and --no-cron ones never.

Their first passes are seconds apart, so the check before the UPDATE sees the tick taken; the
UPDATE's own guard, with schedulers passing at the same instant, is tested in
test_cron_scheduler.py (test_racing_schedulers_enqueue_each_tick_once).
"""

from __future__ import annotations

import datetime
import signal
from collections import Counter

import pytest

from django_outbox.models import CronState, Job, JobStatus
from tests.processes import wait_until
from tests.testapp.models import Note

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def test_worker_processes_started_together_enqueue_each_tick_once(workers):
    # Known for two minutes: the current minute's tick is due at every worker's first pass.
    CronState.objects.create(
        name="every-minute",
        schedule="* * * * * UTC",
        since=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=2),
    )
    started = [
        workers("--concurrency", "1", "--worker-id", f"cron-{number}", OUTBOX_TEST_CRON="1")
        for number in range(3)
    ]
    # A --no-cron worker runs cron jobs but never enqueues them.
    runner = workers("--concurrency", "1", "--no-cron", OUTBOX_TEST_CRON="1")
    for worker in started:
        worker.wait_for_output("cron scheduler running entries=every-minute", timeout=60)
    wait_until(
        lambda: Job.objects.exists() and not Job.objects.exclude(status=JobStatus.SUCCEEDED),
        timeout=30,
        what="the cron job's run",
    )
    for worker in [*started, runner]:
        worker.send(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, worker.stderr
    assert "cron scheduler running" not in runner.stderr
    keys = Counter(Job.objects.values_list("unique_key", flat=True))
    # Workers that straddle a minute boundary see two ticks: each once all the same.
    assert 1 <= len(keys) <= 2
    assert set(keys.values()) == {1}
    assert Note.objects.count() == len(keys)
    enqueued = sum(worker.stderr.count("cron enqueued name=every-minute") for worker in started)
    assert enqueued == len(keys)
