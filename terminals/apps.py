from django.apps import AppConfig


class TerminalsConfig(AppConfig):
    name = "terminals"
    verbose_name = "Terminals"
    default_auto_field = "django.db.models.BigAutoField"
