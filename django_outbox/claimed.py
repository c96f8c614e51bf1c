"""The job a worker thread is running, as its handler and retry strategy see it."""

from __future__ import annotations

import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from .serialization import decode_stored

_current_job: ContextVar[ClaimedJob | None] = ContextVar("django_outbox_current_job", default=None)


@dataclass
class ClaimedJob:
    """One attempt at a job, as the claim returned it.

    ``id`` is the same on every attempt: key calls to other systems on it to make them happen
    once per job. ``lease_token`` is new for every attempt and fences its writes; it serves as
    an idempotency key for one attempt.
    """

    id: int
    task_name: str
    queue: str
    # The payload as the claim returned it, JSON text; ``payload`` once the attempt decoded it.
    stored_payload: Any
    # Attempts made, this one included (1 on the first run): the Job's ``attempts`` as the claim
    # left it.
    attempts: int
    max_attempts: int
    priority: int
    lease_token: uuid.UUID
    worker_id: str
    payload: Any = None
    # What resume() passed (text as the claim returned it; ``resume_data`` once decoded).
    stored_resume_data: Any = None
    resume_data: Any = None
    # OUTBOX["CONTEXT"]'s variables as captured at enqueue (text as the claim returned it;
    # ``context``, {dotted path: value}, once decoded).
    stored_context: Any = None
    context: dict[str, Any] | None = None
    # When (time.monotonic()) and on which thread the handler started: for the watchdog.
    handler_started: float | None = field(default=None, repr=False)
    thread_ident: int | None = field(default=None, repr=False)
    stuck_reported_at: float | None = field(default=None, repr=False)
    # Set by the watchdog when the attempt ran past its task's timeout: the error to record.
    timed_out: str | None = field(default=None, repr=False)
    # The handler's stack when it timed out, recorded as the attempt's traceback.
    timed_out_stack: str = field(default="", repr=False)
    # What the handler returned, or the exception it raised (for django_outbox.testing).
    result: Any = field(default=None, repr=False)
    error: BaseException | None = field(default=None, repr=False)
    # Flags other threads set (the heartbeat, the watchdog) and the handler's thread reads.
    # Plain booleans: a bool is read and written whole, and nobody waits on them (an Event
    # each, built with its lock for every claimed job, was a sixth of a worker's busy time).
    _lease_lost: bool = field(default=False, repr=False)
    _cancel_requested: bool = field(default=False, repr=False)
    # Since when (time.monotonic()) the heartbeat has found the job's row locked by another
    # transaction, and whether it told that the lease ran out meanwhile (None, False: free).
    row_locked_since: float | None = field(default=None, repr=False)
    # Whether the lock was told at WARNING (it outlasted a heartbeat interval).
    row_lock_reported: bool = field(default=False, repr=False)
    expiry_reported: bool = field(default=False, repr=False)
    # Set by the runner once the handler returned or raised: the outcome is being recorded, and
    # the runner itself notices a lost lease from then on.
    handler_done: bool = field(default=False, repr=False)

    def decode_payload(self) -> Any:
        """Decode the stored payload into ``payload``; raise if the row holds one it can't."""
        self.payload = decode_stored(self.stored_payload)
        if self.stored_resume_data is not None:
            self.resume_data = decode_stored(self.stored_resume_data)
        return self.payload

    def decode_context(self) -> dict[str, Any] | None:
        """Decode the captured context variables into ``context``; None if none or unreadable
        (a job runs without a context it cannot read rather than fail for it)."""
        if self.stored_context is not None and self.context is None:
            try:
                decoded = decode_stored(self.stored_context)
            except Exception:
                decoded = None
            self.context = decoded if isinstance(decoded, dict) else None
        return self.context

    @property
    def lease_lost(self) -> bool:
        """Whether another worker may own this job now; a long handler may stop early."""
        return self._lease_lost

    def mark_lease_lost(self) -> None:
        self._lease_lost = True

    @property
    def cancel_requested(self) -> bool:
        """Whether ``cancel()`` asked this job to stop: a long handler should return soon.

        The worker learns of it at its next heartbeat and stops extending the lease; the
        attempt ends as cancelled however the handler ends (with ``atomic=True`` its writes
        roll back).
        """
        return self._cancel_requested

    def mark_cancel_requested(self) -> None:
        self._cancel_requested = True


def current_job() -> ClaimedJob:
    """Return the job the calling handler runs for.

    Raise LookupError outside a handler run by a worker (or by ``django_outbox.testing``).
    """
    job = _current_job.get()
    if job is None:
        raise LookupError("current_job() is only available inside a task run by a worker.")
    return job


def set_current_job(job: ClaimedJob | None) -> Any:
    """Make ``job`` the current job of this thread; return a token for ``reset_current_job``."""
    return _current_job.set(job)


def reset_current_job(token: Any) -> None:
    _current_job.reset(token)
