"""Lifecycle signals, sent by the worker after the job's new status is committed.

Each is sent with ``sender`` the Task (None for a job whose task is not registered) and
``job`` the ClaimedJob. ``job_failed`` and ``job_retrying`` also pass ``error`` (text).
"""

from django.dispatch import Signal

job_started = Signal()
job_succeeded = Signal()
job_retrying = Signal()
job_failed = Signal()
