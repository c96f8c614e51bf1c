"""One worker process's engine, as ``manage.py run_outbox_worker`` runs it.

``loop.Worker`` claims jobs (``claims``, ``pacing``) and runs them in threads (``runner``);
``completer`` records non-atomic successes in batches; ``maintenance`` runs the heartbeat
(leases, rescues, pruning, ``registration`` in the worker registry, ``activity`` counters) and
the ``watchdog``; ``shutdown`` and ``stop_signals`` stop it gracefully; ``supervisor`` runs
several worker processes; ``health`` says whether this process's workers are healthy.

May import: the base modules, ``db``, ``jobs``, ``tasks`` and ``cron``. Never the admin, the
commands or ``stats``.
"""
