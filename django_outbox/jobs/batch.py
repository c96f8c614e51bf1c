"""What ``enqueue_many`` returns: the jobs it wrote, built only when someone looks at them."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from ..models import Job


class EnqueuedJobs(Sequence["Job"]):
    """The jobs of one ``enqueue_many`` call, in payload order.

    A sequence of saved ``Job`` rows, like the list ``bulk_create`` returns; the ``Job``
    objects are built on first access, all at once. Building a thousand of them costs more
    than inserting their rows, and most callers use none, or only ``ids``.
    """

    def __init__(
        self,
        ids: list[int],
        *,
        build: Callable[[], list[Job]] | None = None,
        jobs: list[Job] | None = None,
    ) -> None:
        self.ids = ids
        self._build = build
        self._jobs = jobs

    @classmethod
    def from_rows(
        cls,
        template: Job,
        payloads: Sequence[Any],
        ids: list[int],
        enqueued_at: datetime.datetime,
        using: str,
    ) -> EnqueuedJobs:
        """The jobs of rows inserted like ``template`` with ``payloads``, given their ids."""

        def build() -> list[Job]:
            from ..models import Job

            names = [field.attname for field in Job._meta.concrete_fields]
            values = [getattr(template, name) for name in names]
            positions = {name: position for position, name in enumerate(names)}
            if not isinstance(template.run_at, datetime.datetime):
                values[positions["run_at"]] = enqueued_at
            values[positions["enqueued_at"]] = enqueued_at
            jobs = []
            first_round = template.fair_round
            for position, (payload, job_id) in enumerate(zip(payloads, ids, strict=True)):
                values[positions["id"]] = job_id
                values[positions["payload"]] = payload
                if first_round is not None:
                    values[positions["fair_round"]] = first_round + position
                jobs.append(Job.from_db(using, names, values))
            return jobs

        return cls(ids, build=build)

    @classmethod
    def from_jobs(cls, jobs: list[Job]) -> EnqueuedJobs:
        """Jobs already built (saved by ``bulk_create``)."""
        return cls([job.pk for job in jobs], jobs=jobs)

    @property
    def jobs(self) -> list[Job]:
        """The ``Job`` objects, built on first access."""
        if self._jobs is None:
            assert self._build is not None
            self._jobs = self._build()
            self._build = None
        return self._jobs

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> Job: ...
    @overload
    def __getitem__(self, index: slice) -> list[Job]: ...
    def __getitem__(self, index: int | slice) -> Job | list[Job]:
        return self.jobs[index]

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EnqueuedJobs):
            return self.jobs == other.jobs
        if isinstance(other, list):
            return self.jobs == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # Mutable, like a list.

    def __repr__(self) -> str:
        shown = ", ".join(map(str, self.ids[:5])) + (", ..." if len(self.ids) > 5 else "")
        return f"<EnqueuedJobs: {len(self.ids)} jobs, ids [{shown}]>"
