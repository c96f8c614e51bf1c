"""Read-only figures of the queue: what ``outbox_stats``, the dashboard and the probes show.

``queue_stats``, ``processing_time_stats`` and ``retry_stats`` are the public figures
(``docs/api.md``). The other modules read for the admin's dashboard (``overview``), the worker
registry's rows (``workers``) and ``manage.py outbox_health`` (``probes``).

May import: the base modules and ``db``. Never the worker, the admin or the commands: figures
read rows, whoever wrote them.
"""

from .figures import PERCENTILES, QueueStats, processing_time_stats, queue_stats, retry_stats

__all__ = ["PERCENTILES", "QueueStats", "processing_time_stats", "queue_stats", "retry_stats"]
