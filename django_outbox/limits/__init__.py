"""Concurrency caps and rate limits across every worker, kept by the database at claim time.

A task (``@task(concurrency=3, rate_limit="10/s")``) or a queue (``OUTBOX["QUEUES"]``) may cap
how many of its jobs run at once and how many start per period, for the whole task or queue
and for each limit key's jobs (``concurrency_per_key``, ``rate_limit_per_key``; the key is
``enqueue(limit_key=...)``, else the fair key). Jobs under a limit carry a limit key and are
claimed apart (``claims``): the claim locks the rows of the limits it counts, counts the jobs
running under each (whose lease has not expired), takes tokens from each rate's bucket, and
claims what fits, in one short transaction. ``declared`` says which limits apply to a job,
``buckets`` is the token bucket's arithmetic, ``pauses`` what ``RateLimited`` pauses, and
``usage`` each limit's use for ``outbox_stats`` and the dashboard.

May import: the base modules, ``db``, ``jobs``, ``tasks``. The worker and ``stats`` import it.
"""
