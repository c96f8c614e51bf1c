"""Tasks of Django's tasks framework (django.tasks, or its backport on Django 5.2) on the outbox
backend.

Imported by the testapp's tasks module, so that workers declare them as they start.
"""

from typing import TYPE_CHECKING

import django

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import task
else:
    from django_tasks import task  # The backport, on Django 5.2.

from django_outbox.backends import max_attempts

from .models import Note


@task
def add(a, b):
    return a + b


@task(queue_name="emails", priority=10)
def note(text, *, suffix=""):
    Note.objects.create(text=text + suffix)
    return {"written": text + suffix}


@task
def fails(message):
    raise ValueError(message)


@task(takes_context=True)
def attempt_number(context):
    return context.attempt


@task
async def add_async(a, b):
    return a + b


@task(backend="non_atomic")
def note_then_fail(text):
    Note.objects.create(text=text)
    raise RuntimeError("after the note")


@task
def writes_then_fails(text):
    Note.objects.create(text=text)
    raise RuntimeError("after the note")


@task
def noop(*args, **kwargs):
    return None


@task(takes_context=True)
def own_result_id(context):
    return context.task_result.id


@task
def exits():
    raise SystemExit("This task exited")


@task
def raises_nested():
    raise ValueError(ValueError("This task failed"))


@task
def returns_a_set():
    return {1, 2}


@task(backend="retrying", takes_context=True)
def fails_until_third_attempt(context):
    if context.attempt < 3:
        raise ValueError(f"attempt {context.attempt}")
    return context.attempt


@task(backend="retrying")
def always_fails_retried():
    raise ValueError("again")


@task(backend="retrying")
def returns_a_set_retried():
    return {1, 2}


@task
@max_attempts(12)
def fails_twelve_times():
    raise ValueError("once more")
