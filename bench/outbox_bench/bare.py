"""The bare-Django floor of an atomic job: what its SQL costs through Django, with no queue.

An atomic bench job (``tasks.write_atomic``) commits two writes in one transaction: the
handler's ``INSERT`` of one small row and the job's success mark, an ``UPDATE`` of its row by
primary key. Here the same two writes run through Django's ORM, one transaction per job, from
the same number of processes and threads as the workers, with nothing else: no claim, no lease,
no heartbeat, no signals, no logging. The ratio of the atomic drain to this floor is the share
of Django's own speed the queue keeps, whatever the machine; the floor's CPU per job, without
the ``UPDATE``, is the handler's own cost, so that the rest of a worker's CPU per job is the
queue's.

Like ``clients``, this module imports no models at import time: a spawned process imports it
before ``django.setup()``.
"""

from __future__ import annotations

import multiprocessing
import resource
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from typing import Any

#: The queue of the job rows the floor updates: no worker claims them (they are "running").
BARE_QUEUE = "outbox-bench-bare"


@dataclass(frozen=True)
class BareFloor:
    """Jobs per second, and CPU microseconds per job of the processes that ran them."""

    per_s: float
    cpu_us_per_job: float


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process(ids: list[int], threads: int, with_update: bool, start: Barrier, results: Any) -> None:
    import django

    django.setup()
    from django.db import connections, transaction
    from django.db.models.functions import Now

    from django_outbox.models import Job, JobStatus

    from .tables import effect_model
    from .writes import using

    db = using()
    effects = effect_model()._default_manager.db_manager(db)
    jobs = Job.objects.using(db)

    def run(share: list[int]) -> None:
        for job_id in share:
            with transaction.atomic(using=db):
                effects.create(job_id=job_id)
                if with_update:
                    jobs.filter(pk=job_id).update(status=JobStatus.SUCCEEDED, finished_at=Now())
        connections[db].close()

    shares = [ids[index::threads] for index in range(threads)]
    # Each thread's connection and Django's caches warm, as a running worker's are.
    warm = [threading.Thread(target=run, args=([],)) for _ in shares]
    for thread in warm:
        thread.start()
        thread.join()
    start.wait()
    cpu = _cpu_seconds()
    workers = [threading.Thread(target=run, args=(share,)) for share in shares]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    results.put((time.monotonic(), _cpu_seconds() - cpu))


def measure_bare_floor(
    job_ids: list[int], processes: int, threads: int, *, with_update: bool = True
) -> BareFloor:
    """Run the atomic job's writes for ``job_ids`` (rows of BARE_QUEUE) from ``processes``
    processes of ``threads`` threads; without ``with_update``, the handler's INSERT alone."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(processes + 1)
    results = context.Queue()
    workers = [
        context.Process(
            target=_process,
            args=(job_ids[index::processes], threads, with_update, start, results),
        )
        for index in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        start.wait(timeout=120)
        started = time.monotonic()
        ends, cpu = zip(*(results.get(timeout=600) for _ in workers), strict=True)
    finally:
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
    return BareFloor(
        per_s=len(job_ids) / (max(ends) - started),
        cpu_us_per_job=sum(cpu) / len(job_ids) * 1e6,
    )
