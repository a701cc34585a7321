"""Checks the audit trail's hash chain, then this host's recordings against the sizes and SHA-256s it sealed."""

import socket

from django.core.management.base import BaseCommand, CommandError

from terminals.audit import last_hash, verify_chain
from terminals.recordings import verify_files


class Command(BaseCommand):
    help = ("Verify that no audit event was changed, removed or inserted, and that no recording of this host was "
            "changed or removed without an audited deletion: exit 1 at the first broken link or changed file.")

    def handle(self, *args, **options):
        count, broken = verify_chain()
        if broken:
            raise CommandError(broken)
        checked, problems = verify_files()
        if problems:
            raise CommandError("\n".join(problems))
        self.stdout.write(f"audit trail intact: {count} events, last hash {last_hash()[:16] or '(none)'}; "
                          f"{checked} recordings on {socket.gethostname()} match their sealed SHA-256")
