from django.apps import AppConfig


class TerminalsConfig(AppConfig):
    name = "terminals"
    verbose_name = "Terminals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .plumbing import outage  # noqa: F401 - listens for the first new connection after a database outage
        from .runtime.confinement import make_undumpable

        # Every process holding the settings (web, worker, commands): terminals must not read them from /proc.
        make_undumpable()
        _keep_data_private()


def _keep_data_private() -> None:
    """The data directory (the SQLite database, its WAL) is the service's alone: no other account may enter it."""
    import os

    from django.conf import settings

    data_dir = getattr(settings, "DATA_DIR", None)
    if data_dir is not None and os.path.isdir(data_dir):
        try:
            os.chmod(data_dir, 0o700)
        except OSError:
            pass  # not ours to change; SECURITY.md says to keep it private
    # A SQLite file outside the data directory (DATABASE_URL) is kept to the service's account too.
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        for path in (str(database["NAME"]), f"{database['NAME']}-wal", f"{database['NAME']}-shm"):
            try:
                os.chmod(path, 0o600)
            except OSError:
                pass  # not made yet (it is then made inside the data directory by default), or not ours
