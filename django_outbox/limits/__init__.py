"""Concurrency caps and rate limits across every worker, kept by the database at claim time.

A task (``@task(concurrency=3, rate_limit="10/s")``) or a queue (``OUTBOX["QUEUES"]``) may cap
how many of its jobs run at once and how many start per period, for the whole task or queue
and for each limit key's jobs (``concurrency_per_key``, ``rate_limit_per_key``; the key is
``enqueue(limit_key=...)``, else the fair key). Jobs under a limit carry a limit key and are
claimed apart (``claims``): a batch where every limit has room for it, checked under the
limits' row locks once claimed, else job by job under those locks; either way it counts the
jobs running under each limit (whose lease has not expired) and takes tokens from each rate's
bucket, in one short transaction. ``state`` reads, locks and writes the limits' rows and
counts the running jobs, ``declared`` says which limits apply to a job,
``buckets`` is the token bucket's arithmetic, ``pauses`` what ``RateLimited`` pauses, and
``usage`` each limit's use for ``outbox_stats`` and the dashboard.

May import: the base modules, ``db``, ``jobs``, ``tasks``. The worker and ``stats`` import it.
"""
