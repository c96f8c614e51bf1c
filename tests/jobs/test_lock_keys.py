"""enqueue(lock=...): jobs with one key run one at a time, in order; other keys in parallel."""

import datetime
import itertools
import uuid

import pytest
from django.utils import timezone

from django_outbox import EnqueueError
from django_outbox.models import Job, JobStatus
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def read_line_log(log):
    """Return {label: (start, end)} and the labels in the order they started."""
    spans: dict[str, tuple[float | None, float | None]] = {}
    order: list[str] = []
    for line in log.read_text().splitlines():
        event, label, when, _pid = line.split()
        start, end = spans.get(label, (None, None))
        if event == "start":
            spans[label] = (float(when), end)
            order.append(label)
        else:
            spans[label] = (start, float(when))
    return spans, order


def overlapping(spans, labels):
    ordered = sorted((spans[label] for label in labels), key=lambda span: span[0])
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered))


def test_jobs_of_one_key_run_one_at_a_time_in_order_and_other_keys_in_parallel(tmp_path):
    log = tmp_path / "runs.log"
    for n in range(6):
        for key in ("a", "b"):
            tasks.runs_in_line.enqueue(
                {"label": f"{key}{n}", "log": str(log), "sleep": 0.05}, lock=f"order-{key}"
            )
    run_worker(concurrency=4, prefetch=4)
    spans, order = read_line_log(log)
    for key in ("a", "b"):
        labels = [f"{key}{n}" for n in range(6)]
        assert [label for label in order if label[0] == key] == labels
        assert not overlapping(spans, labels)
    # The two keys' lines ran side by side.
    assert overlapping(spans, ["a0", "b0"])


def test_priority_goes_first_within_a_key(tmp_path):
    log = tmp_path / "runs.log"
    tasks.runs_in_line.enqueue({"label": "low", "log": str(log)}, lock="k")
    tasks.runs_in_line.enqueue({"label": "high", "log": str(log)}, lock="k", priority=5)
    run_worker(concurrency=2)
    assert read_line_log(log)[1] == ["high", "low"]


def test_a_retrying_job_keeps_its_place_in_its_keys_line(settings):
    settings.OUTBOX = {**settings.OUTBOX, "RETRY": {"BASE_DELAY": 3600, "JITTER": 0}}
    first = tasks.fails_once.enqueue(lock="k")
    second = tasks.noop.enqueue(lock="k")
    other = tasks.noop.enqueue(lock="other")
    run_worker()
    assert Job.objects.get(pk=first.pk).status == JobStatus.RETRYING
    assert Job.objects.get(pk=second.pk).status == JobStatus.READY
    assert Job.objects.get(pk=other.pk).status == JobStatus.SUCCEEDED
    # Once the first has run again and succeeded, the second runs.
    Job.objects.filter(pk=first.pk).update(run_at=Job.objects.get(pk=other.pk).enqueued_at)
    run_worker()
    assert Job.objects.get(pk=second.pk).status == JobStatus.SUCCEEDED


@pytest.mark.parametrize("status", [JobStatus.HALTED, JobStatus.RUNNING])
def test_a_halted_or_running_job_holds_the_line(status):
    first = tasks.noop.enqueue(lock="k")
    lease = {
        "lease_token": uuid.uuid4(),
        "lease_expires_at": timezone.now() + datetime.timedelta(1),
    }
    Job.objects.filter(pk=first.pk).update(status=status, **lease)
    second = tasks.noop.enqueue(lock="k")
    assert run_worker().claimed == 0
    assert Job.objects.get(pk=second.pk).status == JobStatus.READY


def test_finished_jobs_do_not_hold_the_line():
    for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
        Job.objects.filter(pk=tasks.noop.enqueue(lock="k").pk).update(status=status)
    waiting = tasks.noop.enqueue(lock="k")
    run_worker()
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.SUCCEEDED


def test_enqueue_many_lines_its_jobs_up_under_one_key(tmp_path):
    log = tmp_path / "runs.log"
    tasks.runs_in_line.enqueue_many(
        [{"label": f"j{n}", "log": str(log)} for n in range(5)], lock="batch"
    )
    run_worker(concurrency=4, prefetch=4)
    spans, order = read_line_log(log)
    assert order == [f"j{n}" for n in range(5)]
    assert not overlapping(spans, order)


@pytest.mark.parametrize(
    ("lock", "message"),
    [
        ("", "lock must be a non-empty string"),
        (42, "lock must be a non-empty string"),
        ("k" * 256, "lock must be at most 255 characters"),
    ],
)
def test_a_bad_lock_is_refused(lock, message):
    with pytest.raises(EnqueueError, match=message):
        tasks.noop.enqueue(lock=lock)
    assert not Job.objects.exists()


@pytest.mark.process
def test_worker_processes_keep_a_keys_order(tmp_path, workers):
    log = tmp_path / "runs.log"
    for n in range(12):
        for key in ("a", "b", "c"):
            tasks.runs_in_line.enqueue(
                {"label": f"{key}{n:02}", "log": str(log), "sleep": 0.01}, lock=key
            )
    processes = [workers("--burst", "--concurrency", "4", "--prefetch", "4") for _ in range(2)]
    for process in processes:
        assert process.wait(timeout=60) == 0, process.stderr
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 36)
    spans, order = read_line_log(log)
    for key in ("a", "b", "c"):
        labels = [f"{key}{n:02}" for n in range(12)]
        assert [label for label in order if label[0] == key] == labels
        assert not overlapping(spans, labels)
