"""Tasks the tests enqueue. A worker process imports these through autodiscovery."""

import collections
import contextlib
import dataclasses
import decimal
import os
import threading
import time
from pathlib import Path

from django.db import IntegrityError, connection, transaction

from django_outbox import GIVE_UP, Halt, RetryPolicy, Snooze, current_job, task
from django_outbox.apps import uses_task_backend
from django_outbox.exceptions import RateLimited as PauseLimit

from .models import Note


@task
def noop(payload):
    return None


@task(queue="emails", max_attempts=10)
def write_note(payload):
    Note.objects.create(text=payload["text"], job_id=current_job().id)


@task(max_attempts=3)
def always_fails(payload):
    Note.objects.create(text="written before failing")
    raise RuntimeError(payload.get("message", "boom") if payload else "boom")


@task(max_attempts=3)
def fails_once(payload):
    if current_job().attempts == 1:
        raise ConnectionError("first attempt fails")
    Note.objects.create(text="second attempt")


class RateLimited(Exception):
    def __init__(self, retry_after):
        super().__init__(f"rate limited, retry after {retry_after}s")
        self.retry_after = retry_after


class BadRequest(Exception):
    pass


def honour_retry_after(job, exc):
    if isinstance(exc, RateLimited):
        return exc.retry_after
    if isinstance(exc, BadRequest):
        return GIVE_UP
    return None


@task(max_attempts=5, retry_strategy=honour_retry_after, retry=RetryPolicy(base_delay=0, jitter=0))
def calls_api(payload):
    if payload["error"] == "rate":
        raise RateLimited(payload["retry_after"])
    if payload["error"] == "bad":
        raise BadRequest("400")
    raise ValueError("other")


@task(max_attempts=5, give_up_on=(KeyError,))
def gives_up_on_key_error(payload):
    raise KeyError("missing")


@task(atomic=False)
def non_atomic_note(payload):
    Note.objects.create(text=payload["text"])


@task(max_attempts=5)
def record_run(payload):
    """Append this run to a file, then (optionally) sleep: process tests count the runs.

    ``until_processes: N`` holds the run until N processes have written to the log (30 s at
    most), so that a test of several worker processes doesn't depend on which one started first.
    """
    with Path(payload["log"]).open("a") as log:
        log.write(f"{current_job().id} {current_job().attempts} {os.getpid()}\n")
    if payload.get("until_processes"):
        _wait_for_processes(Path(payload["log"]), payload["until_processes"])
    if payload.get("sleep"):
        time.sleep(payload["sleep"])


def _wait_for_processes(log: Path, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # Whole lines only: the last may be read half-written by another process (its run
        # then failed with an IndexError here, and ran again: a job "run twice" in a full
        # suite), as tests.processes.read_runs reads them.
        text = log.read_text()
        pids = {line.split()[2] for line in text[: text.rfind("\n") + 1].splitlines()}
        if len(pids) >= count:
            return
        time.sleep(0.05)


@task(max_attempts=5)
def sleeps_on_first_attempt(payload):
    """Like record_run, but sleep only on attempt 1: a rescued job's second run is quick."""
    with Path(payload["log"]).open("a") as log:
        log.write(f"{current_job().id} {current_job().attempts} {os.getpid()}\n")
    if current_job().attempts == 1:
        time.sleep(payload["sleep"])


@task(atomic=False, max_attempts=2)
def non_atomic_fails(payload):
    Note.objects.create(text="kept although the job failed")
    raise RuntimeError("after the write")


# Lets a test hold a handler mid-run (same process only).
handler_started = threading.Event()
handler_may_finish = threading.Event()
lease_lost_seen: list[bool] = []


@task(max_attempts=3)
def waits_for_test(payload):
    Note.objects.create(text="written by a handler that waits", job_id=current_job().id)
    handler_started.set()
    if not handler_may_finish.wait(timeout=30):
        raise TimeoutError("the test never let the handler finish")
    lease_lost_seen.append(current_job().lease_lost)


@task(max_attempts=1)
def fails_when_told(payload):
    """Wait like waits_for_test (writing nothing), then fail."""
    handler_started.set()
    if not handler_may_finish.wait(timeout=30):
        raise TimeoutError("the test never let the handler finish")
    raise RuntimeError("failed when told")


@task
def records_order(payload):
    Note.objects.create(text=payload["label"])


@task(atomic=False, max_attempts=3)
def waits_for_test_non_atomic(payload):
    """Like waits_for_test, outside a transaction (so SQLite's write lock stays free)."""
    Note.objects.create(text="written by a non-atomic handler that waits")
    handler_started.set()
    if not handler_may_finish.wait(timeout=30):
        raise TimeoutError("the test never let the handler finish")
    lease_lost_seen.append(current_job().lease_lost)


@task(atomic=False, max_attempts=5)
def record_run_non_atomic(payload):
    """record_run without a transaction: its success is recorded by the worker's completer."""
    with Path(payload["log"]).open("a") as log:
        log.write(f"{current_job().id} {current_job().attempts} {os.getpid()}\n")
    if payload.get("sleep"):
        time.sleep(payload["sleep"])


@task(atomic=False)
def noop_non_atomic(payload):
    return None


@task(atomic=False, max_attempts=3)
def taken_over_while_running(payload):
    """Return after another worker took the job over (as after an expired lease)."""
    from django_outbox.models import Job

    Job.objects.filter(pk=current_job().id).update(
        lease_token=payload["new_owner"], worker_id="new-owner"
    )


def _delete_from_another_connection(job_id: int) -> None:
    """Delete the job's row as an operator in the admin would: in a transaction of its own."""
    from django_outbox.models import Job

    def delete() -> None:
        try:
            Job.objects.filter(pk=job_id).delete()
        finally:
            connection.close()

    thread = threading.Thread(target=delete)
    thread.start()
    thread.join()


@task(atomic=False, max_attempts=3)
def deleted_while_running(payload):
    """Return after the job's row was deleted."""
    _delete_from_another_connection(current_job().id)


@task(max_attempts=3)
def atomic_deleted_while_running(payload):
    """Return, in the job's transaction, after the job's row was deleted from another one."""
    _delete_from_another_connection(current_job().id)


@task(max_attempts=3)
def waits_for_test_without_writing(payload):
    """Like waits_for_test (atomic) but writing nothing: on SQLite it holds no write lock while
    it waits, and its success is committed by the runner itself, not the completer."""
    handler_started.set()
    if not handler_may_finish.wait(timeout=30):
        raise TimeoutError("the test never let the handler finish")
    lease_lost_seen.append(current_job().lease_lost)


@task
def records_commit_mode(payload):
    """Write the handler connection's synchronous_commit (PostgreSQL) into a Note."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        (mode,) = cursor.fetchone()
    Note.objects.create(text=mode, job_id=current_job().id)


@task(max_attempts=2)
def swallows_integrity_error(payload):
    """An atomic handler that catches a failed INSERT without a savepoint, as users do."""
    note = Note.objects.create(text="before the swallowed error", job_id=current_job().id)
    with contextlib.suppress(IntegrityError):
        Note.objects.create(pk=note.pk, text="a duplicate key")


@task(max_attempts=2)
def catches_integrity_error_in_a_savepoint(payload):
    """The same, done right: the failing INSERT in its own atomic block."""
    note = Note.objects.create(text="kept", job_id=current_job().id)
    try:
        with transaction.atomic():
            Note.objects.create(pk=note.pk, text="a duplicate key")
    except IntegrityError:
        pass


@task(max_attempts=3)
def writes_then_sleeps(payload):
    """Write first, then sleep: on SQLite the handler holds the write lock while it sleeps."""
    Note.objects.create(text="written before sleeping", job_id=current_job().id)
    if payload.get("log"):
        with Path(payload["log"]).open("a") as log:
            log.write(f"{current_job().id} {current_job().attempts} {os.getpid()}\n")
    time.sleep(payload["sleep"])


@task(max_attempts=20)
def chaos_atomic(payload):
    """Write one row with the success mark: a second committed run would show as two rows.

    Work first, then the write: on SQLite the write lock is held from the write to the commit.
    """
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    Note.objects.create(text="atomic", job_id=current_job().id)


@task(atomic=False, max_attempts=20)
def chaos_non_atomic(payload):
    """Write one row per run, kept whatever happens next: duplicates are counted."""
    if payload.get("sleep"):
        time.sleep(payload["sleep"] / 2)
    Note.objects.create(text="non-atomic", job_id=current_job().id)
    if payload.get("sleep"):
        time.sleep(payload["sleep"] / 2)


@task(max_attempts=20)
def reads_then_writes(payload):
    """Read, then write: on SQLite a deferred transaction must upgrade to the write lock."""
    seen = Note.objects.count()
    time.sleep(payload.get("sleep", 0.001))
    Note.objects.create(text=f"saw {seen}", job_id=current_job().id)


@task
def notes_its_status_on_commit(payload):
    """An atomic handler whose on_commit callback records the job's status it then sees."""
    job_id = current_job().id
    Note.objects.create(text="written", job_id=job_id)

    def after_commit():
        from django_outbox.models import Job

        status = Job.objects.get(pk=job_id).status
        in_transaction = connection.in_atomic_block or not connection.get_autocommit()
        Note.objects.create(text=f"after commit: {status}, {in_transaction=}", job_id=job_id)

    transaction.on_commit(after_commit)


#: Runs of the job-control tasks below, by job id (workers in tests run in this process).
runs: collections.Counter[int] = collections.Counter()


@task(max_attempts=1)
def snoozes(payload):
    """Write a note, then snooze ``payload["times"]`` times for ``payload["seconds"]``."""
    job_id = current_job().id
    runs[job_id] += 1
    Note.objects.create(text=f"run {runs[job_id]}", job_id=job_id)
    if runs[job_id] <= payload["times"]:
        seconds = payload["seconds"]
        # JSON has no NaN: the tests name it.
        raise Snooze(float(seconds) if seconds in ("nan", "inf") else seconds)


@task(max_attempts=2)
def awaits_approval(payload):
    """Halt until resumed with {"by": name}; then record who approved."""
    job = current_job()
    runs[job.id] += 1
    Note.objects.create(text="written before halting", job_id=job.id)
    if job.resume_data is None:
        raise Halt(f"waiting for approval of order {payload['order']}")
    Note.objects.create(text=f"approved by {job.resume_data['by']}", job_id=job.id)


@task
def stops_when_cancelled(payload):
    """Tell the test it runs, work until cancel() asks it to stop, then write a note and
    return. (Writing only then keeps SQLite's write lock free for the test's cancel.)"""
    handler_started.set()
    deadline = time.monotonic() + 30
    while not current_job().cancel_requested:
        if time.monotonic() > deadline:
            raise TimeoutError("the test never cancelled the job")
        time.sleep(0.01)
    Note.objects.create(text="written after the cancel", job_id=current_job().id)


@task(atomic=False)
def ignores_cancel(payload):
    """Tell the test it runs, wait until the test lets it finish, and return normally."""
    handler_started.set()
    if not handler_may_finish.wait(timeout=30):
        raise TimeoutError("the test never let the handler finish")


#: What the "mail" tasks below sent, outside any transaction (as an email or an API call is).
sent: list[str] = []


@task(max_attempts=3)
def sends_receipt(payload):
    """Record the receipt, then "send" it: not idempotent, a second run sends it again."""
    Note.objects.create(text=f"receipt for order {payload['order']}", job_id=current_job().id)
    sent.append(f"receipt {payload['order']}")
    return f"sent receipt {payload['order']}"


@task(max_attempts=3)
def sends_receipt_once(payload):
    """The idempotent version: a note keyed on the order says whether it was sent."""
    text = f"receipt for order {payload['order']}"
    if not Note.objects.filter(text=text).exists():
        Note.objects.create(text=text, job_id=current_job().id)
        sent.append(f"receipt {payload['order']}")


@task(atomic=False, max_attempts=3)
def sends_receipt_non_atomic(payload):
    Note.objects.create(text=f"receipt for order {payload['order']}", job_id=current_job().id)
    sent.append(f"receipt {payload['order']}")


@task
def enqueues_a_receipt(payload):
    """A job that enqueues another, as a signup's job enqueues its email."""
    sends_receipt.enqueue({"order": payload["order"]})
    return "enqueued"


def positive_amount(payload):
    if not isinstance(payload, dict) or "amount" not in payload:
        raise ValueError("a payload needs an amount")
    return payload["amount"] > 0


@task(validate_payload=positive_amount)
def charges(payload):
    Note.objects.create(text=f"charged {payload['amount']}")


def _sleep_until_lease_lost(seconds):
    """Run ``seconds`` at most, returning early once the worker says the lease is gone."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not current_job().lease_lost:
        time.sleep(0.01)


@task(atomic=False, max_execute_time=0.2)
def runs_long(payload):
    """Longer than its max_execute_time, then returns normally."""
    handler_started.set()
    _sleep_until_lease_lost(payload["seconds"])


@task(max_attempts=2, timeout=0.3, retry=RetryPolicy(base_delay=3600, jitter=0))
def times_out(payload):
    """Writes a note, then runs past its timeout until the worker gives its lease up."""
    Note.objects.create(text="written by an attempt that timed out", job_id=current_job().id)
    _sleep_until_lease_lost(10)


@task
def notes_request_id(payload):
    """Write down the request id the handler sees (OUTBOX["CONTEXT"] restores it)."""
    from .logcontext import request_id

    Note.objects.create(text=f"request {request_id.get('none')}", job_id=current_job().id)


@task(atomic=False, max_attempts=3)
def runs_in_line(payload):
    """Log when this run of payload["label"] starts and ends (the system-wide monotonic clock),
    with a short sleep between: tests read the file to see which runs overlapped."""
    with Path(payload["log"]).open("a") as log:
        log.write(f"start {payload['label']} {time.monotonic()!r} {os.getpid()}\n")
    time.sleep(payload.get("sleep", 0.02))
    with Path(payload["log"]).open("a") as log:
        log.write(f"end {payload['label']} {time.monotonic()!r} {os.getpid()}\n")


@dataclasses.dataclass
class Order:
    """What a task may take instead of a dict, with a codec."""

    number: int
    total: decimal.Decimal


class OrderCodec:
    """Orders as JSON objects: the built-in rules store the Decimal, this one the dataclass."""

    def encode(self, value):
        if not isinstance(value, Order):
            raise TypeError(f"expected an Order, got {type(value).__name__}")
        return dataclasses.asdict(value)

    def decode(self, data):
        return Order(**data)


@task(codec=OrderCodec())
def ships_order(order):
    """Receives the Order itself."""
    assert isinstance(order, Order), order
    Note.objects.create(text=f"order {order.number} for {order.total}", job_id=current_job().id)


if uses_task_backend():
    # Django's own tasks, on the outbox backend: declared where workers import them.
    from tests.django_tasks.reference import tasks as reference_tasks  # noqa: F401

    from . import django_tasks  # noqa: F401


@task(max_attempts=2)
async def notes_asynchronously(payload):
    """An async handler: the async ORM writes in the job's transaction."""
    await Note.objects.acreate(text=f"{payload['text']} (attempt {current_job().attempts})")
    if payload.get("fail_first") and current_job().attempts == 1:
        raise RuntimeError("first attempt fails after its write")
    return payload["text"]


@task
def note_cron_tick(payload):
    """Write the tick its cron job is for (tests of django_outbox.cron)."""
    from django_outbox.cron import current_tick

    tick = current_tick()
    Note.objects.create(text=f"{payload!r} {tick.isoformat() if tick else None}")


def has_customer(payload):
    if not isinstance(payload, dict) or not isinstance(payload.get("customer"), dict):
        raise ValueError("an invoice needs a customer")


@task(max_attempts=2, validate_payload=has_customer)
def sends_invoice(payload):
    """Fails on data without the customer's email: a poison message until the payload is fixed."""
    email = payload["customer"]["email"]
    Note.objects.create(text=f"invoice {payload.get('number')} to {email}")


def _record_span(task_name, payload, label=""):
    """Run for the payload's seconds, then note the run's start and end (the wall clock, the
    same for every process of this host) and the jobs of the task running at its start (their
    leases unexpired)."""
    from django.db.models.functions import Now

    from django_outbox.models import Job

    started = time.time()
    # Jobs whose worker may still run them: a dead worker's stop counting when leases expire.
    running = Job.objects.filter(
        task_name=task_name, status="running", lease_expires_at__gt=Now()
    ).count()
    time.sleep(float((payload or {}).get("seconds", 0.0)))
    Note.objects.create(
        text=f"span {started:.6f} {time.time():.6f} {running} {label}".strip(),
        job_id=current_job().id,
    )


@task(concurrency=3, atomic=False, max_attempts=3)
def capped(payload):
    """At most 3 run at once across every worker."""
    _record_span(capped.name, payload)


@task(concurrency=8, atomic=False, max_attempts=3)
def capped_at_8(payload):
    """At most 8 run at once across every worker: claims of a few jobs find room to spare
    (claimed in one trip on PostgreSQL) until 4 run."""
    _record_span(capped_at_8.name, payload)


@task(concurrency_per_key=2, atomic=False, max_attempts=3)
def capped_per_key(payload):
    """At most 2 of each limit key's jobs run at once."""
    _record_span(capped_per_key.name, payload, payload.get("key", ""))


@task(rate_limit="5/m", atomic=False)
def rated(payload):
    """At most 5 starts a minute, in bursts of at most 5."""
    Note.objects.create(text=f"start {time.time():.6f}", job_id=current_job().id)


@task(rate_limit_per_key="100/s", max_attempts=2)
def throttled_by_service(payload):
    """Told by the service to come back later: its key (or what ``per`` says) pauses."""
    if payload.get("limited"):
        raise PauseLimit(retry_after=payload.get("after", 30), per=payload.get("per"))
    Note.objects.create(text=f"ran {payload.get('n')}", job_id=current_job().id)
