"""Lists API keys as an operator needs them: prefix, name, user, created, last used, expiry, revoked."""

import json

from django.core.management.base import BaseCommand

from terminals.models import ApiKey

COLUMNS = ("prefix", "name", "user", "created", "lastUsed", "expires", "revoked")


def _when(moment) -> str | None:
    return moment.isoformat(timespec="seconds") if moment else None


class Command(BaseCommand):
    help = "List API keys (never their secrets): prefix, name, user, created, last used, expiry, revoked."

    def add_arguments(self, parser):
        parser.add_argument("--user", help="only this user's keys")
        parser.add_argument("--json", action="store_true", help="one JSON array instead of a table")

    def handle(self, *args, user, **options):
        keys = ApiKey.objects.select_related("user").order_by("created")
        if user:
            keys = keys.filter(user__username=user)
        rows = [{"prefix": key.display_prefix, "name": key.name, "user": key.user.get_username(),
                 "created": _when(key.created), "lastUsed": _when(key.last_used), "expires": _when(key.expires_at),
                 "revoked": _when(key.revoked_at)} for key in keys]
        if options["json"]:
            self.stdout.write(_dumps(rows))
            return
        table = [COLUMNS] + [tuple(row[column] or "-" for column in COLUMNS) for row in rows]
        widths = [max(len(str(line[index])) for line in table) for index in range(len(COLUMNS))]
        for line in table:
            self.stdout.write("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip())


def _dumps(rows) -> str:
    return json.dumps(rows, indent=2)
