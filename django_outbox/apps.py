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
