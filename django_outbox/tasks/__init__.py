"""Declaring tasks and enqueueing their jobs: ``@task``, ``Task``, ``enqueue()``.

``base`` holds ``Task``: a handler with its options, which builds its jobs and hands them to
``jobs`` to write. ``registry`` holds the tasks this process declared (``@task`` registers
them) and finds them by name. ``enqueue`` holds the public functions that take a task or its
name.

May import: the base modules, ``db`` and ``jobs``. Never ``cron``, the worker or above.
"""

from .base import Task
from .registry import task

__all__ = ["Task", "task"]
