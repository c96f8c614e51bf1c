from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class OutboxConfig(AppConfig):
    name = "django_outbox"
    verbose_name = _("Outbox")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks.

        # Register every app's tasks in every process (web and worker) alike, so a worker knows
        # exactly the tasks the code declares and enqueue can find them by name.
        autodiscover_modules("tasks")
        if uses_task_backend():
            # The outbox task that runs Django tasks, even where no tasks module loaded it.
            from . import backends  # noqa: F401


def uses_task_backend() -> bool:
    """Whether a backend of ``settings.TASKS`` (django.tasks) is the outbox's."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, dict):
        return False
    return any(
        isinstance(options, dict)
        and options.get("BACKEND") == "django_outbox.backends.OutboxBackend"
        for options in backends.values()
    )
