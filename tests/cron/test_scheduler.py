"""Cron entries are enqueued once per tick, whatever the workers, restarts and outages."""

from __future__ import annotations

import datetime
import logging
import threading

import pytest
from django.db import DatabaseError, connection, connections
from django.test import override_settings

from django_outbox.cron.entries import CronEntry
from django_outbox.cron.expressions import CronExpression
from django_outbox.cron.scheduler import CronScheduler, enqueue_due, tick_key
from django_outbox.models import CronState, Job
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp.models import Note

UTC = datetime.timezone.utc
TASK = "tests.testapp.tasks.note_cron_tick"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def entry(name="report", schedule="*/5 * * * *", task=TASK, zone="UTC", **options) -> CronEntry:
    return CronEntry(name, task, CronExpression(schedule, zone), **options)


def passes(entries, *moments) -> list[list[Job]]:
    """Run the scheduler's pass at each moment, as a worker's clock would read them."""
    return [enqueue_due(entries, now=moment, using="default") for moment in moments]


pytestmark = pytest.mark.django_db


def test_a_new_entry_starts_at_the_first_tick_after_a_worker_saw_it():
    report = entry()
    first, same_minute, next_tick = passes(
        [report], utc(2026, 11, 25, 3, 7), utc(2026, 11, 25, 3, 7, 30), utc(2026, 11, 25, 3, 10)
    )
    # 03:05 had passed when the entry was first seen: it never runs.
    assert first == []
    assert same_minute == []
    assert len(next_tick) == 1
    job = Job.objects.get()
    assert job.task_name == TASK
    assert job.unique_key == "cron:report:2026-11-25T03:10:00Z"
    state = CronState.objects.get(name="report")
    assert state.last_tick == utc(2026, 11, 25, 3, 10)
    assert state.last_job_id == job.pk
    assert state.schedule == "*/5 * * * * UTC"


def test_each_tick_is_enqueued_once_however_often_the_pass_runs():
    report = entry(schedule="* * * * *")
    moments = [utc(2026, 11, 25, 3, 0)]
    for minute in range(1, 4):
        # Several passes a minute, as after restarts or by several workers in turn.
        moments += [utc(2026, 11, 25, 3, minute, second) for second in (0, 1, 30, 59)]
    passes([report], *moments)
    assert sorted(str(key) for key in Job.objects.values_list("unique_key", flat=True)) == [
        "cron:report:2026-11-25T03:01:00Z",
        "cron:report:2026-11-25T03:02:00Z",
        "cron:report:2026-11-25T03:03:00Z",
    ]


def test_a_restarted_scheduler_does_not_enqueue_the_same_tick_again():
    report = entry()
    clock = iter([utc(2026, 11, 25, 3, 0), utc(2026, 11, 25, 3, 5, 1), utc(2026, 11, 25, 3, 5, 40)])
    done = threading.Event()
    before = CronScheduler(
        [report], using="default", worker_id="a", done=done, clock=lambda: next(clock)
    )
    assert before.run_once() == []
    assert len(before.run_once()) == 1
    # A new worker process in the same minute: its state is in the database, not in memory.
    after = CronScheduler(
        [report], using="default", worker_id="b", done=done, clock=lambda: next(clock)
    )
    assert after.run_once() == []
    assert Job.objects.count() == 1


def test_missed_ticks_are_not_caught_up_the_latest_runs_once_late():
    report = entry(schedule="*/5 * * * *")
    passes([report], utc(2026, 11, 25, 3, 0))
    # No worker from 03:00 to 04:02: 12 ticks passed; the latest, 04:00, runs once.
    (late,) = passes([report], utc(2026, 11, 25, 4, 2))
    assert [job.unique_key for job in late] == ["cron:report:2026-11-25T04:00:00Z"]
    assert passes([report], utc(2026, 11, 25, 4, 3)) == [[]]
    (on_time,) = passes([report], utc(2026, 11, 25, 4, 5))
    assert [job.unique_key for job in on_time] == ["cron:report:2026-11-25T04:05:00Z"]


def test_a_worker_whose_clock_is_behind_enqueues_no_earlier_tick():
    report = entry(schedule="* * * * *")
    passes([report], utc(2026, 11, 25, 3, 0), utc(2026, 11, 25, 3, 5))
    # Another host's clock reads 03:03: that tick is older than the last one enqueued.
    assert passes([report], utc(2026, 11, 25, 3, 3, 10)) == [[]]
    assert Job.objects.count() == 1


def test_a_changed_schedule_starts_afresh_at_its_own_next_tick():
    passes([entry(schedule="0 3 * * *")], utc(2026, 11, 24, 12, 0), utc(2026, 11, 25, 3, 0))
    assert Job.objects.count() == 1
    # A deploy at 10:00 moves it to 04:00: today's 04:00 has passed and does not run now.
    moved = entry(schedule="0 4 * * *")
    assert passes([moved], utc(2026, 11, 25, 10, 0), utc(2026, 11, 25, 10, 1)) == [[], []]
    (next_day,) = passes([moved], utc(2026, 11, 26, 4, 0))
    assert [job.unique_key for job in next_day] == ["cron:report:2026-11-26T04:00:00Z"]
    assert CronState.objects.get().schedule == "0 4 * * * UTC"


def test_the_time_zone_is_part_of_the_schedule():
    paris = entry(schedule="0 3 * * *", zone="Europe/Paris")
    passes([paris], utc(2026, 11, 24, 12, 0))
    # 03:00 in Paris is 02:00 UTC in November.
    assert passes([paris], utc(2026, 11, 25, 1, 59)) == [[]]
    (jobs,) = passes([paris], utc(2026, 11, 25, 2, 0))
    assert [job.unique_key for job in jobs] == ["cron:report:2026-11-25T02:00:00Z"]


def test_the_job_has_the_entrys_payload_queue_and_priority():
    report = entry(payload={"days": 30}, queue="reports", priority=7)
    passes([report], utc(2026, 11, 25, 3, 0), utc(2026, 11, 25, 3, 5))
    job = Job.objects.get()
    assert (job.queue, job.priority, job.decoded_payload()) == ("reports", 7, {"days": 30})


@pytest.mark.django_db(transaction=True)
def test_the_handler_reads_the_tick_its_job_is_for():
    passes([entry(payload={"days": 30})], utc(2026, 11, 25, 3, 0), utc(2026, 11, 25, 3, 6))
    run_worker()
    assert Note.objects.get().text == "{'days': 30} 2026-11-25T03:05:00+00:00"


def test_one_failing_entry_leaves_the_others_their_ticks(caplog):
    broken = entry(name="broken", task="no.such.task")
    fine = entry(name="fine")
    passes([broken, fine], utc(2026, 11, 25, 3, 0))
    (jobs,) = passes([broken, fine], utc(2026, 11, 25, 3, 5))
    assert [job.unique_key for job in jobs] == ["cron:fine:2026-11-25T03:05:00Z"]
    assert "cron entry could not be enqueued name=broken task=no.such.task" in caplog.text
    # Its tick was not used up: the entry runs once the task is deployed.
    assert CronState.objects.get(name="broken").last_tick is None


def test_the_scheduler_sleeps_until_the_earliest_next_tick():
    now = utc(2026, 11, 25, 3, 7, 30)
    scheduler = CronScheduler(
        [entry(name="a", schedule="*/5 * * * *"), entry(name="b", schedule="8 * * * *")],
        using="default",
        worker_id="w",
        done=threading.Event(),
        clock=lambda: now,
    )
    assert scheduler.seconds_to_next_tick() == pytest.approx(30.05)
    hourly = CronScheduler(
        [entry(schedule="0 0 1 1 *")],
        using="default",
        worker_id="w",
        done=threading.Event(),
        clock=lambda: now,
    )
    # Capped, so that a clock stepped forward is noticed.
    assert hourly.seconds_to_next_tick() == 300.0


@pytest.mark.django_db(transaction=True)
def test_racing_schedulers_enqueue_each_tick_once():
    """Four workers' schedulers, each on its own connection, pass at the same moments."""
    entries = [
        entry(name="every-minute", schedule="* * * * *"),
        entry(name="five", schedule="*/5 * * * *"),
    ]
    moments = [utc(2026, 11, 25, 3, 0)] + [utc(2026, 11, 25, 3, minute) for minute in range(1, 11)]
    barrier = threading.Barrier(4)
    enqueued: list[int] = []
    failures: list[BaseException] = []

    def scheduler() -> None:
        try:
            for moment in moments:
                barrier.wait(timeout=30)
                enqueued.extend(job.pk for job in enqueue_due(entries, now=moment, using="default"))
        except BaseException as error:
            failures.append(error)
            barrier.abort()
        finally:
            connections["default"].close()

    threads = [threading.Thread(target=scheduler) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    keys = list(Job.objects.values_list("unique_key", flat=True))
    # Ten minutes: ten ticks of one entry, two of the other; each once, and every job
    # written was returned by exactly one scheduler.
    assert len(keys) == 12 == len(set(keys))
    assert sorted(enqueued) == sorted(Job.objects.values_list("pk", flat=True))
    assert CronState.objects.count() == 2


@pytest.fixture
def cron_table_renamed():
    """Make the scheduler's queries fail as they would with its table gone, until restored."""
    renamed = {"now": False}

    def rename(gone: bool) -> None:
        old, new = (
            ("django_outbox_cronstate", "cronstate_away")
            if gone
            else ("cronstate_away", "django_outbox_cronstate")
        )
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {old} RENAME TO {new}")
        renamed["now"] = gone

    yield rename
    if renamed["now"]:
        rename(False)


@pytest.mark.django_db(transaction=True)
def test_the_scheduler_outlives_database_errors(cron_table_renamed, caplog):
    caplog.set_level(logging.INFO, logger="django_outbox")
    report = entry(schedule="* * * * *")
    passes([report], utc(2026, 11, 25, 3, 0))
    cron_table_renamed(True)
    done = threading.Event()
    scheduler = CronScheduler(
        [report],
        using="default",
        worker_id="w",
        done=done,
        clock=lambda: utc(2026, 11, 25, 3, 1),
        retry_seconds=0.05,
    )
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: "enqueueing cron jobs worker=w failed" in caplog.text, what="the error")
        assert thread.is_alive()
        cron_table_renamed(False)
        wait_until(lambda: Job.objects.exists(), what="the tick's job once the table is back")
        # Logged once the pass has returned: a moment after its job is committed.
        wait_until(lambda: "works again" in caplog.text, what="the recovery's log line")
    finally:
        done.set()
        thread.join(10)
    assert not thread.is_alive()
    assert Job.objects.get().unique_key == "cron:report:2026-11-25T03:01:00Z"


@pytest.mark.django_db(transaction=True)
def test_a_database_error_reaches_the_caller_of_a_pass(cron_table_renamed):
    cron_table_renamed(True)
    with pytest.raises(DatabaseError):
        passes([entry()], utc(2026, 11, 25, 3, 0))


def test_tick_keys_name_the_entry_and_the_minute():
    assert tick_key("a:b", utc(2026, 1, 2, 3, 4)) == "cron:a:b:2026-01-02T03:04:00Z"


# Through the worker.

CRON_SETTINGS = {"CRON": {"every-minute": {"TASK": TASK, "SCHEDULE": "* * * * *", "PAYLOAD": "hi"}}}


def cron_settings(**extra):
    from django.conf import settings

    return override_settings(OUTBOX={**settings.OUTBOX, **CRON_SETTINGS, **extra})


def threads_named(name: str) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == name]


@pytest.mark.django_db(transaction=True)
def test_a_worker_enqueues_a_due_tick_and_runs_it(worker_thread):
    with cron_settings():
        # Known to workers for two minutes: this minute's tick is due and was not enqueued.
        CronState.objects.create(
            name="every-minute",
            schedule="* * * * * UTC",
            since=datetime.datetime.now(UTC) - datetime.timedelta(minutes=2),
        )
        worker_thread(concurrency=1)
        wait_until(lambda: Note.objects.exists(), timeout=20, what="the cron job's run")
    note = Note.objects.get()
    assert note.text.startswith("'hi' ")
    assert Job.objects.get().status == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_a_worker_without_cron_or_in_burst_mode_starts_no_scheduler(worker_thread):
    from django_outbox.worker.loop import Worker

    with cron_settings():
        assert Worker(cron=False)._maintenance.cron is None
        assert Worker(burst=True)._maintenance.cron is None
        assert Worker()._maintenance.cron is not None
    # No entries: no thread, and no query.
    assert Worker()._maintenance.cron is None
    worker_thread(concurrency=1)
    wait_until(lambda: threads_named("outbox-heartbeat"), what="the worker's threads")
    assert not threads_named("outbox-cron")
    assert not CronState.objects.exists()


def test_run_outbox_worker_no_cron_turns_the_scheduler_off():
    from django_outbox.management.commands.run_outbox_worker import Command

    parser = Command().create_parser("manage.py", "run_outbox_worker")
    assert parser.parse_args(["--no-cron"]).cron is False
    assert parser.parse_args([]).cron is True


@pytest.mark.django_db(transaction=True)
def test_ticks_are_stored_and_read_back_without_use_tz():
    report = entry()
    with override_settings(USE_TZ=False):
        passes([report], utc(2026, 11, 25, 3, 0), utc(2026, 11, 25, 3, 5), utc(2026, 11, 25, 3, 6))
        state = CronState.objects.get()
        assert timezone_naive(state.last_tick)
    assert Job.objects.count() == 1
    assert CronState.objects.get().last_tick == utc(2026, 11, 25, 3, 5)


def timezone_naive(moment: datetime.datetime | None) -> bool:
    return moment is not None and moment.tzinfo is None
