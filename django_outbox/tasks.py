"""Declaring tasks: ``@task`` turns a function of one payload argument into a registered Task."""

from __future__ import annotations

import datetime
import inspect
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, overload

from asgiref.sync import async_to_sync

from . import registry
from .checks import max_attempts_error, priority_error, queue_name_error
from .codecs import Codec, codec_at, codec_error
from .conf import get_settings
from .exceptions import (
    InvalidTaskError,
    PayloadDecodeError,
    PayloadError,
    PayloadValidationError,
)
from .retry import RetryPolicy, RetryStrategy
from .serialization import encode

if TYPE_CHECKING:
    from .enqueued import EnqueuedJobs
    from .models import Job

TASK_NAME_MAX_LENGTH = 255
#: The longest max_execute_time or timeout: a week, as the longest lease.
DURATION_MAX = 7 * 86400

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
            from .cron.expressions import CronExpression, CronExpressionError

            try:
                CronExpression(self.cron)
            except CronExpressionError as error:
                raise InvalidTaskError(f"{where}: cron: {error}") from None
        for option in ("max_execute_time", "timeout"):
            seconds = getattr(self, option)
            if seconds is not None and not (
                isinstance(seconds, int | float)
                and not isinstance(seconds, bool)
                and math.isfinite(seconds)
                and 0 < seconds <= DURATION_MAX
            ):
                raise InvalidTaskError(
                    f"{where}: {option} must be a number of seconds above 0 and at most "
                    f"{DURATION_MAX} (7 days), or None, not {seconds!r}."
                )

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
        from .serialization import decode

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

    def enqueue(
        self,
        payload: Any = None,
        *,
        delay: datetime.timedelta | float | None = None,
        run_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
        depends_on: Job | int | Iterable[Job | int] | None = None,
        unique_key: str | None = None,
        unique_while: str = "pending",
        on_duplicate: str = "return",
        fair_key: str | None = None,
    ) -> Job:
        """Write a job for this task in the caller's transaction and return it.

        ``delay`` (a timedelta or seconds) or ``run_at`` (an aware datetime) postpone it;
        ``priority`` and ``queue`` override the task's; ``lock``, ``depends_on``, ``unique_key``
        and its options, ``fair_key``: see ``django_outbox.enqueue``.
        """
        from .enqueuing import enqueue

        return enqueue(
            self,
            payload,
            delay=delay,
            run_at=run_at,
            priority=priority,
            queue=queue,
            lock=lock,
            depends_on=depends_on,
            unique_key=unique_key,
            unique_while=unique_while,
            on_duplicate=on_duplicate,
            fair_key=fair_key,
        )

    async def aenqueue(self, payload: Any = None, **options: Any) -> Job:
        """``enqueue`` from async code; see ``django_outbox.aenqueue``."""
        from .enqueuing import aenqueue

        return await aenqueue(self, payload, **options)

    def enqueue_many(
        self,
        payloads: Iterable[Any],
        *,
        delay: datetime.timedelta | float | None = None,
        run_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
        fair_key: str | None = None,
    ) -> EnqueuedJobs:
        """Write one job of this task per payload in one INSERT; see ``enqueue_many``."""
        from .enqueuing import enqueue_many

        return enqueue_many(
            self,
            payloads,
            delay=delay,
            run_at=run_at,
            priority=priority,
            queue=queue,
            lock=lock,
            fair_key=fair_key,
        )


@overload
def task(func: Handler, /) -> Task: ...
@overload
def task(
    *,
    name: str | None = ...,
    queue: str | None = ...,
    max_attempts: int | None = ...,
    priority: int | None = ...,
    atomic: bool = ...,
    retry: RetryPolicy | None = ...,
    retry_strategy: RetryStrategy | None = ...,
    give_up_on: tuple[type[BaseException], ...] = ...,
    validate_payload: PayloadValidator | None = ...,
    max_execute_time: float | None = ...,
    timeout: float | None = ...,
    codec: Codec | None = ...,
    cron: str | None = ...,
) -> Callable[[Handler], Task]: ...
def task(func: Handler | None = None, /, **options: Any) -> Task | Callable[[Handler], Task]:
    """Declare a task: ``@task`` or ``@task(queue="emails", max_attempts=10, ...)``.

    Options: ``name`` (default: module.function), ``queue``, ``max_attempts`` (the first run
    counts), ``priority`` (higher runs first), ``atomic`` (run in a transaction that commits with
    the job's success; default True), ``retry`` (a RetryPolicy), ``retry_strategy`` (a callable
    ``(job, exc)`` returning a delay, ``GIVE_UP`` or None), ``give_up_on`` (exception classes
    that fail the job without retrying), ``validate_payload`` (a callable that raises, or returns
    False, to refuse a payload at enqueue: ``PayloadValidationError``, nothing written),
    ``max_execute_time`` (seconds after which a running job's stack is logged at ERROR) and
    ``timeout`` (seconds after which its attempt counts as failed; see ``watchdog``), ``codec``
    (turns payloads into JSON and back; see ``django_outbox.codecs``), ``cron`` (a cron
    expression such as ``"*/5 * * * *"``: workers enqueue the task, without a payload, once per
    tick; see ``django_outbox.cron``).
    """

    def decorate(function: Handler) -> Task:
        declared = Task(function, **options)
        registry.register(declared)
        return declared

    if func is not None:
        return decorate(func)
    return decorate
