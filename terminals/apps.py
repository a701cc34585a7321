from django.apps import AppConfig


class TerminalsConfig(AppConfig):
    name = "terminals"
    verbose_name = "Terminals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import schema  # noqa: F401 - registers the OpenAPI extensions
