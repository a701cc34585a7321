"""Disables a user (their keys and sessions stop working at once), or enables them again; on the audit trail."""

from django.core.management.base import BaseCommand, CommandError

from terminals import keys
from terminals.exceptions import ServiceError


class Command(BaseCommand):
    help = "Disable USERNAME: their keys are refused and their live WebSockets closed; --enable undoes it."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--enable", action="store_true", help="enable the user again")

    def handle(self, *args, username, enable, **options):
        actor = keys.command_line_actor("disable_user")
        try:
            _, changes = keys.set_user(actor, username, active=enable)
        except ServiceError as error:
            raise CommandError(error.message) from None
        state = "enabled" if enable else "disabled"
        self.stdout.write(f"{username} {state}." if changes else f"{username} was {state} already.")
