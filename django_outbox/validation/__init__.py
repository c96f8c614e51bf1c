"""What a valid value is: every bound, default and value validator, in one place.

Settings (``conf``), the system checks (``checks``), enqueue, ``@task``, retries and cron all
ask these modules, so that a value is accepted or refused the same way wherever it comes from.
``text`` says which strings the databases can store and what a name or key may be; ``bounds``
holds every numeric limit; ``loaders`` imports the objects settings name by dotted path;
``schedules`` reads cron expressions' fields; ``setting`` holds the ``OUTBOX`` setting's
defaults and its whole validation.

A leaf: nothing here imports any other module of django_outbox, so everything may import it.
"""
