"""Revokes an API key by the prefix shown everywhere (tk_9b76e171), on the audit trail."""

from django.core.management.base import BaseCommand, CommandError

from terminals import keys
from terminals.exceptions import ServiceError


class Command(BaseCommand):
    help = "Revoke the API key with this prefix (as list_api_keys shows it, e.g. tk_9b76e171); it stops working at once."

    def add_arguments(self, parser):
        parser.add_argument("prefix")

    def handle(self, *args, prefix, **options):
        try:
            record = keys.find_key(prefix)
            revoked = keys.revoke_key(keys.command_line_actor("revoke_api_key"), record)
        except ServiceError as error:
            raise CommandError(error.message) from None
        state = "revoked" if revoked else "was revoked already"
        self.stdout.write(f"{record.display_prefix} ({record.user.get_username()}) {state}.")
