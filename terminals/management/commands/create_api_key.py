"""Creates an API key for a user (creating the user if needed) and prints the key alone on the last line."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from terminals import keys
from terminals.environment import separation_warning


class Command(BaseCommand):
    help = "Create an API key for USERNAME; the key is shown once, on the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--staff", action="store_true", help="make the user staff: sees every terminal and audit event")
        parser.add_argument("--name", default="", help="a label for the key")
        parser.add_argument("--expires-days", type=int, default=None, help="the key stops working after N days")

    def handle(self, *args, username, staff, name, expires_days, **options):
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days must be at least 1")
        actor = keys.command_line_actor("create_api_key")
        user = get_user_model().objects.filter(username=username).first()
        created = user is None
        if created:
            user = keys.create_user(actor, username, staff=staff)
        elif staff and not user.is_staff:
            keys.set_user(actor, username, staff=True)
            user.refresh_from_db()
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        record, key = keys.create_key(actor, user, name=name, expires_at=expires_at)
        self.stderr.write(
            f"{'Created user ' + username + ' and a' if created else 'Created a'}n API key {record.display_prefix}"
            f"{' (staff)' if user.is_staff else ''}{', expires ' + expires_at.isoformat() if expires_at else ''}."
        )
        self.warn_if_users_share(created)
        self.stdout.write(key)

    def warn_if_users_share(self, created: bool) -> None:
        """A second user is the moment separation starts to matter: say so where the operator looks."""
        warning = separation_warning()
        if created and warning and get_user_model().objects.count() > 1:
            self.stderr.write(f"{warning} This service now has more than one user.")
