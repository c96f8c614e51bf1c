"""The claimed jobs waiting for a worker thread: a queue that takes a whole claim at once."""

from __future__ import annotations

import queue
from collections.abc import Sequence

from ..claimed import ClaimedJob


class ReadyJobs(queue.Queue[ClaimedJob | None]):
    """A ``queue.Queue`` (unbounded) of claimed jobs, and ``None`` to tell a thread to end."""

    def put_claimed(self, jobs: Sequence[ClaimedJob]) -> None:
        """Add a claim's jobs under one lock and wake as many threads as jobs came.

        One ``put`` per job took the lock and notified once per job: a twentieth of a no-op
        drain's worker CPU went there.
        """
        if not jobs:
            return
        with self.not_empty:
            self.queue.extend(jobs)
            self.unfinished_tasks += len(jobs)
            self.not_empty.notify(len(jobs))
