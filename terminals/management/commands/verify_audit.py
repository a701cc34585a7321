"""Checks the audit trail's hash chain and reports the first broken link, if any."""

from django.core.management.base import BaseCommand, CommandError

from terminals.audit import last_hash, verify_chain


class Command(BaseCommand):
    help = "Verify that no audit event was changed, removed or inserted: exit 1 at the first broken link."

    def handle(self, *args, **options):
        count, broken = verify_chain()
        if broken:
            raise CommandError(broken)
        self.stdout.write(f"audit trail intact: {count} events, last hash {last_hash()[:16] or '(none)'}")
