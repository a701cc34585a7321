"""Creates a user, on the audit trail; with --password, a generated one is shown once."""

import secrets

from django.core.management.base import BaseCommand, CommandError

from terminals import keys
from terminals.exceptions import ServiceError


class Command(BaseCommand):
    help = "Create USERNAME. Give them keys with create_api_key; --password makes a web login shown once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--staff", action="store_true", help="sees every terminal, key and audit event")
        parser.add_argument("--password", action="store_true", help="generate a password for the web admin")

    def handle(self, *args, username, staff, password, **options):
        generated = secrets.token_urlsafe(12) if password else None
        try:
            keys.create_user(keys.command_line_actor("create_user"), username, staff=staff, password=generated)
        except ServiceError as error:
            raise CommandError(error.message) from None
        self.stderr.write(f"Created user {username}{' (staff)' if staff else ''}.")
        if generated:
            self.stdout.write(f"password (shown once): {generated}")
