"""``Task``: a function of one payload argument, with how to enqueue, run and retry its jobs.

``@task`` (``registry``) declares one. A Task builds its jobs (its name, its queue's defaults,
its payload checked and encoded) and hands them to ``django_outbox.jobs`` to write;
``Task.using(**options)`` returns a copy that enqueues with other options, as ``django.tasks``'
``Task.using`` does.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections

from .. import signals
from ..codecs import Codec, codec_at
from ..conf import get_settings
from ..db import queries_for
from ..exceptions import (
    EnqueueError,
    InvalidTaskError,
    PayloadDecodeError,
    PayloadError,
    PayloadValidationError,
)
from ..jobs.context_variables import capture
from ..jobs.inserts import insert_job, insert_jobs
from ..jobs.options import (
    EnqueueOptions,
    check_job_options,
    check_names,
    check_unique_options,
    dependency_ids,
    run_at_of,
)
from ..retry import RetryPolicy, RetryStrategy
from ..serialization import decode, encode
from ..validation.bounds import max_attempts_error, priority_error, task_duration_error
from ..validation.limits import LIMIT_OPTIONS, limit_error
from ..validation.loaders import codec_error
from ..validation.schedules import cron_fields
from ..validation.text import TASK_NAME_MAX_LENGTH, name_error, queue_name_error

if TYPE_CHECKING:
    from typing import Unpack

    from ..jobs.batch import EnqueuedJobs
    from ..models import Job

Handler = Callable[[Any], Any]
#: ``validate_payload(payload)``: raise (or return False) to refuse a payload at enqueue.
PayloadValidator = Callable[[Any], Any]


class Task:
    """A function that workers run for jobs naming it, with how to run and retry it."""

    def __init__(
        self,
        func: Handler,
        *,
        name: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
        atomic: bool = True,
        retry: RetryPolicy | None = None,
        retry_strategy: RetryStrategy | None = None,
        give_up_on: tuple[type[BaseException], ...] = (),
        validate_payload: PayloadValidator | None = None,
        max_execute_time: float | None = None,
        timeout: float | None = None,
        codec: Codec | None = None,
        cron: str | None = None,
        concurrency: int | None = None,
        concurrency_per_key: int | None = None,
        rate_limit: str | None = None,
        rate_limit_per_key: str | None = None,
    ) -> None:
        if not callable(func):
            raise InvalidTaskError(f"@task decorates a function, not {func!r}.")
        self.func = func
        self.is_async = inspect.iscoroutinefunction(func)
        self.qualified_function = f"{func.__module__}.{func.__qualname__}"
        self.name = self.qualified_function if name is None else name
        self._queue = queue
        self._max_attempts = max_attempts
        self._priority = priority
        self.atomic = atomic
        self._retry = retry
        self.retry_strategy = retry_strategy
        self.give_up_on = tuple(give_up_on)
        self.validate_payload = validate_payload
        self.max_execute_time = max_execute_time
        self.timeout = timeout
        self._codec = codec
        self.cron = cron
        # Across every worker (django_outbox.limits): jobs running at once and starts per
        # period ("10/s"), of the whole task and of each limit key's jobs.
        self.concurrency = concurrency
        self.concurrency_per_key = concurrency_per_key
        self.rate_limit = rate_limit
        self.rate_limit_per_key = rate_limit_per_key
        # Options every enqueue of this task starts from (``using``), and the task as declared,
        # which signals name as their sender whatever copy enqueued.
        self.options: dict[str, Any] = {}
        self.declared = self
        self._validate()
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def _validate(self) -> None:
        where = f"@task for {self.qualified_function}"
        if not isinstance(self.name, str) or not self.name or len(self.name) > TASK_NAME_MAX_LENGTH:
            raise InvalidTaskError(
                f"{where}: name must be a non-empty string of at most {TASK_NAME_MAX_LENGTH} "
                f"characters, not {self.name!r}."
            )
        if self._queue is not None and (problem := queue_name_error(self._queue)):
            raise InvalidTaskError(f"{where}: {problem}")
        if self._max_attempts is not None and (problem := max_attempts_error(self._max_attempts)):
            raise InvalidTaskError(f"{where}: {problem}")
        if self._priority is not None and (problem := priority_error(self._priority)):
            raise InvalidTaskError(f"{where}: {problem}")
        if not isinstance(self.atomic, bool):
            raise InvalidTaskError(f"{where}: atomic must be True or False.")
        if self._retry is not None and not isinstance(self._retry, RetryPolicy):
            raise InvalidTaskError(f"{where}: retry must be a django_outbox.RetryPolicy.")
        if self.retry_strategy is not None and not callable(self.retry_strategy):
            raise InvalidTaskError(f"{where}: retry_strategy must be callable(job, exc).")
        if not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in self.give_up_on
        ):
            raise InvalidTaskError(f"{where}: give_up_on must be a tuple of exception classes.")
        if self.validate_payload is not None and not callable(self.validate_payload):
            raise InvalidTaskError(f"{where}: validate_payload must be callable(payload).")
        if self._codec is not None and (problem := codec_error(self._codec)):
            raise InvalidTaskError(f"{where}: {problem}")
        if self.cron is not None:
            try:
                cron_fields(self.cron)
            except ValueError as error:
                raise InvalidTaskError(f"{where}: cron: {error}") from None
        for option in ("max_execute_time", "timeout"):
            if problem := task_duration_error(option, getattr(self, option)):
                raise InvalidTaskError(f"{where}: {problem}")
        for option in LIMIT_OPTIONS:
            if problem := limit_error(option, getattr(self, option)):
                raise InvalidTaskError(f"{where}: {problem}")

    @property
    def limited(self) -> bool:
        """Whether the task declares a concurrency cap or a rate limit."""
        return any(getattr(self, option) is not None for option in LIMIT_OPTIONS)

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    def check_payload(self, payload: Any) -> None:
        """Raise PayloadValidationError if ``validate_payload`` refuses ``payload``.

        The validator refuses by raising (its message is kept) or by returning False.
        """
        if self.validate_payload is None:
            return
        try:
            accepted = self.validate_payload(payload)
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            raise PayloadValidationError(
                f"validate_payload of {self.name} refused the payload: {message}"
            ) from exc
        if accepted is False:
            raise PayloadValidationError(
                f"validate_payload of {self.name} refused the payload (it returned False)."
            )

    def __call__(self, payload: Any = None) -> Any:
        """Run the function now, in this thread, without a job."""
        return self.run(payload)

    def run(self, payload: Any) -> Any:
        """Run the handler for ``payload`` in this thread; an ``async def`` one to its end.

        A coroutine function runs on an event loop of its own (``async_to_sync``); the async
        ORM's queries (``await Model.objects.acreate(...)``) and ``sync_to_async`` calls run
        in this thread, so inside the job's transaction when the task is atomic.
        """
        if self.is_async:
            return async_to_sync(self.func)(payload)
        return self.func(payload)

    # Settings may change after import (override_settings), so options resolve on each use.
    # A job takes the defaults of the queue it goes to, which enqueue(queue=...) may change.
    @property
    def codec(self) -> Codec | None:
        """The task's own codec, else ``OUTBOX["CODEC"]``'s, else None (JSON as it is)."""
        if self._codec is not None:
            return self._codec
        path = get_settings().codec
        return codec_at(path) if path is not None else None

    def encode_payload(self, payload: Any, path: str = "payload") -> Any:
        """Return ``payload`` as the job stores it: through the codec, then the JSON rules."""
        codec = self.codec
        if codec is not None:
            try:
                payload = codec.encode(payload)
            except Exception as exc:
                raise PayloadError(
                    f"{path}: the codec of {self.name} could not encode it: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return encode(payload, path)

    def decode_payload(self, stored: Any, path: str = "payload") -> Any:
        """Return the payload ``encode_payload`` stored as ``stored``: the JSON rules, then the
        codec. Raise PayloadDecodeError if it cannot be read back."""
        payload = decode(stored, path)
        codec = self.codec
        if codec is None:
            return payload
        try:
            return codec.decode(payload)
        except Exception as exc:
            raise PayloadDecodeError(
                f"{path}: the codec of {self.name} could not decode it: {type(exc).__name__}: {exc}"
            ) from exc

    @property
    def queue(self) -> str:
        return self._queue or get_settings().default_queue

    @property
    def max_attempts(self) -> int:
        return self.max_attempts_for(self.queue)

    @property
    def priority(self) -> int:
        return self.priority_for(self.queue)

    @property
    def retry_policy(self) -> RetryPolicy:
        return self.retry_policy_for(self.queue)

    def max_attempts_for(self, queue: str) -> int:
        """The task's own max_attempts, else ``queue``'s, else the global default."""
        if self._max_attempts is not None:
            return self._max_attempts
        return get_settings().queue_options(queue).max_attempts

    def priority_for(self, queue: str) -> int:
        if self._priority is not None:
            return self._priority
        return get_settings().queue_options(queue).priority

    def retry_policy_for(self, queue: str) -> RetryPolicy:
        if self._retry is not None:
            return self._retry
        return RetryPolicy.from_setting(get_settings().queue_options(queue).retry)

    def using(self, **options: Unpack[EnqueueOptions]) -> Task:
        """Return a copy of this task whose jobs are enqueued with ``options`` by default.

        ``send_receipt.using(queue="emails", delay=60).enqueue(payload)``; options given to
        ``enqueue`` itself still win. The copy runs, and sends signals, as this task. A delay
        counts from each enqueue. Options of the wrong form raise here, as enqueue would.
        """
        check_names(options, "Task.using()")
        check_job_options(options)
        check_unique_options(options)
        run_at_of(options.get("delay"), options.get("run_at"))
        dependency_ids(options.get("depends_on"))
        changed = copy.copy(self)
        changed.options = {**self.options, **options}
        return changed

    def build_job(self, payload: Any = None, **options: Unpack[EnqueueOptions]) -> Job:
        """Return an unsaved Job of this task for ``payload``, every argument checked.

        ``depends_on`` and the unique options are not a job's columns: ``enqueue`` checks and
        applies them when it writes the job.
        """
        return self._job(payload, {**self.options, **options}, with_payload=True)

    def enqueue(self, payload: Any = None, **options: Unpack[EnqueueOptions]) -> Job:
        """Write a job for this task in the caller's transaction and return it.

        See ``django_outbox.enqueue`` for the options and what each guarantees.
        """
        merged: dict[str, Any] = {**self.options, **options}
        check_names(merged, "enqueue()")
        check_unique_options(merged)
        parents = dependency_ids(merged.get("depends_on"))
        if parents and merged.get("fair_key") is not None:
            raise EnqueueError(
                "A job takes depends_on or fair_key, not both: fair jobs are claimed by round, "
                "without waiting for other jobs."
            )
        job = self._job(payload, merged, with_payload=True)
        written = insert_job(
            job,
            parents=parents,
            unique_key=merged.get("unique_key"),
            unique_while=merged.get("unique_while", "pending"),
            on_duplicate=merged.get("on_duplicate", "return"),
        )
        if written is job and signals.job_enqueued.has_listeners():
            signals.send(signals.job_enqueued, self.declared, job=job)
        return written

    async def aenqueue(self, payload: Any = None, **options: Unpack[EnqueueOptions]) -> Job:
        """``enqueue`` from async code; see ``django_outbox.aenqueue``."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(payload, **options)

    def enqueue_many(
        self, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
    ) -> EnqueuedJobs:
        """Write one job of this task per payload, in one INSERT where the database allows.

        See ``django_outbox.enqueue_many``.
        """
        merged: dict[str, Any] = {**self.options, **options}
        check_names(merged, "enqueue_many()", batch=True)
        if isinstance(payloads, str | bytes | bytearray | dict):
            unit = {str: "character", bytes: "byte", bytearray: "byte"}.get(type(payloads), "key")
            raise EnqueueError(
                "payloads must be an iterable of payloads (e.g. a list of dicts), not a "
                f"{type(payloads).__name__}: it would enqueue one job per {unit}. For one job, "
                "call enqueue()."
            )
        try:
            payloads = iter(payloads)
        except TypeError:
            raise EnqueueError(
                "payloads must be an iterable of payloads (e.g. a list of dicts), not "
                f"{type(payloads).__name__}."
            ) from None
        # The options are the same for every job: check them once.
        template = self._job(None, merged, with_payload=False)
        encoded = []
        for index, payload in enumerate(payloads):
            try:
                self.check_payload(payload)
                encoded.append(self.encode_payload(payload))
            except EnqueueError as error:
                raise type(error)(f"payloads[{index}]: {error}") from error
        jobs = insert_jobs(template, encoded)
        if signals.job_enqueued.has_listeners():
            for job in jobs:
                signals.send(signals.job_enqueued, self.declared, job=job)
        return jobs

    async def aenqueue_many(
        self, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
    ) -> EnqueuedJobs:
        """``enqueue_many`` from async code; see ``django_outbox.aenqueue``."""
        return await sync_to_async(self.enqueue_many, thread_sensitive=True)(payloads, **options)

    def _limit_key(self, queue: str, options: dict[str, Any]) -> str | None:
        """The job's limit key: None unless a limit applies (the task's or the queue's) or
        one was given; per-key limits count jobs by ``limit_key``, else by ``fair_key``."""
        key = options.get("limit_key")
        if key is not None:
            return str(key)
        if not (self.limited or get_settings().queue_options(queue).limited):
            return None
        fair_key = options.get("fair_key")
        return "" if fair_key is None else str(fair_key)

    def _job(self, payload: Any, options: dict[str, Any], *, with_payload: bool) -> Job:
        """Return an unsaved Job for ``payload`` and ``options``, checking every one of them.

        Without ``with_payload``, a template for ``enqueue_many``: the payload is left unset (each
        payload is checked and encoded on its own).
        """
        # The model needs the app registry, and this module is imported before it is ready (a
        # project's models.py may declare tasks).
        from ..models import Job

        # A Task's own name, and below its queue: @task() does not look for NUL characters.
        if problem := name_error("task", self.name):
            raise EnqueueError(problem)
        check_job_options(options)
        queue = options.get("queue") or self.queue
        if problem := name_error("queue", queue):
            raise EnqueueError(problem)
        if with_payload:
            self.check_payload(payload)
        priority = options.get("priority")
        max_attempts = options.get("max_attempts")
        job = Job(
            task_name=self.name,
            queue=queue,
            payload=self.encode_payload(payload) if with_payload else None,
            priority=self.priority_for(queue) if priority is None else priority,
            max_attempts=self.max_attempts_for(queue) if max_attempts is None else max_attempts,
            context=capture(),
            lock_key=options.get("lock"),
            fair_key=options.get("fair_key"),
            limit_key=self._limit_key(queue, options),
        )
        when = run_at_of(options.get("delay"), options.get("run_at"))
        if when is not None:
            connection = connections[get_settings().database]
            job.run_at = queries_for(connection).on_database_clock(when)
        return job
