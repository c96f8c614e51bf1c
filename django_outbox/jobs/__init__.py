"""Writing job rows, from any caller: the web request, a worker, the admin, a command.

Inserting jobs in the caller's transaction (``inserts``, with the options every enqueue checks
in ``options``), every change of a job's status after that (``transitions``), acting on jobs
from outside a worker (``control``: cancel, resume; ``housekeeping``: retry and prune many),
waking idle workers (``wakeups``) and the context variables that travel with a job
(``context_variables``).

May import: the base modules and ``db``. Never ``tasks`` (tasks build jobs and hand them here),
the worker, the admin or the commands.
"""
