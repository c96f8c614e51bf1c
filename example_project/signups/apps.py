from django.apps import AppConfig


class SignupsConfig(AppConfig):
    name = "signups"
    verbose_name = "Signups"
