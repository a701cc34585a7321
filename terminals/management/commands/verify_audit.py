"""Checks the audit trail's hash chain and reports the first broken link, if any."""

from django.core.management.base import BaseCommand, CommandError

from terminals.models import AuditEvent


class Command(BaseCommand):
    help = "Verify that no audit event was changed, removed or inserted: exit 1 at the first broken link."

    def handle(self, *args, **options):
        previous, count = "", 0
        for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
            if event.previous_hash != previous:
                raise CommandError(
                    f"broken link at audit event {event.id}: it follows {event.previous_hash[:16] or '(nothing)'}..., "
                    f"but the event before it hashes to {previous[:16] or '(nothing)'}... (an event was removed or inserted)"
                )
            if event.compute_hash() != event.hash:
                raise CommandError(f"broken link at audit event {event.id}: its content does not match its hash (it was changed)")
            previous, count = event.hash, count + 1
        self.stdout.write(f"audit trail intact: {count} events, last hash {previous[:16] or '(none)'}")
