"""Removes the Unix accounts, homes and shell copies the service made on this host, for when it was only tried out
(as root, it made a `term-*` account and home per user). Never an account it did not make, never while one of
those accounts' terminals or processes runs; --dry-run lists what would go."""

import os
import shutil
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from terminals.audit import audit
from terminals.keys import command_line_actor
from terminals.models import TerminalSession
from terminals.runtime import accounts, sealed


class Command(BaseCommand):
    help = ("Remove the Unix accounts (term-*), their homes and the execute-only shell copies this service made "
            "for its users on this host. Refuses while any of their terminals or processes runs.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
        parser.add_argument("--user", action="append", default=[], metavar="USERNAME",
                            help="only this user's account (repeatable); the shell copies then stay")

    def handle(self, *args, dry_run, user, **options):
        if os.geteuid() != 0 and not dry_run:
            raise CommandError("only root can remove Unix accounts: run it as root (or with --dry-run to list them)")
        chosen = self._chosen(user)
        self._refuse_while_running(chosen)
        for username, entry in chosen:
            home = accounts.own_home(entry)
            what = f"account {entry.pw_name} (uid {entry.pw_uid}) of user {username}" + (f", home {home}" if home
                                                                                       else "")
            if dry_run:
                self.stdout.write(f"would remove {what}")
                continue
            removed = accounts.remove_made_account(entry)
            audit(command_line_actor("remove_accounts"), "remove_account", account=entry.pw_name,
                  uid=entry.pw_uid, user=username, removed=removed)
            self.stdout.write(f"removed {what}")
        if not chosen:
            self.stdout.write("No account of this service's users is left on this host.")
        self._shell_copies(dry_run, whole=not user, chosen=chosen)

    def _chosen(self, usernames: list[str]) -> list[tuple[str, object]]:
        """(username, account) of every account made for a user of this database; accounts made for another
        service's users on the same host are left to that service."""
        users = get_user_model().objects.all()
        if usernames:
            users = users.filter(username__in=usernames)
            missing = set(usernames) - {user.get_username() for user in users}
            if missing:
                raise CommandError(f"no user named {', '.join(sorted(missing))}; list them with "
                                   "manage.py list_api_keys")
        by_tag = {accounts.user_tag(user.get_username()): user.get_username() for user in users}
        return [(by_tag[accounts.tag_of(entry)], entry) for entry in accounts.made_accounts()
                if accounts.tag_of(entry) in by_tag]

    def _refuse_while_running(self, chosen) -> None:
        usernames = [username for username, _ in chosen]
        active = TerminalSession.objects.active().filter(owner__username__in=usernames)
        running = accounts.processes_of({entry.pw_uid for _, entry in chosen})
        if not active.exists() and not running:
            return
        lines = [f"terminal {terminal.id} of {terminal.owner.get_username()} is active"
                 for terminal in active.select_related("owner")[:20]]
        lines += [f"account {entry.pw_name} runs processes {', '.join(map(str, running[entry.pw_uid][:10]))}"
                  for _, entry in chosen if entry.pw_uid in running]
        raise CommandError("nothing was removed, because terminals still run:\n  " + "\n  ".join(lines) +
                           "\nEnd them first (DELETE /api/terminals/{id}, or stop the service), then run this again.")

    def _shell_copies(self, dry_run: bool, *, whole: bool, chosen) -> None:
        """The execute-only shell copies: shared by every account, so removed only with the last one on the host."""
        directory = Path(settings.TERMINALS["SEALED_SHELL_DIR"])
        if not directory.is_dir():
            return
        if not whole:
            self.stdout.write(f"kept the shell copies in {directory} (--user given)")
            return
        going = {entry.pw_name for _, entry in chosen} if dry_run else set()
        remaining = [entry.pw_name for entry in accounts.made_accounts() if entry.pw_name not in going]
        if remaining:
            shown = ", ".join(remaining[:5]) + (", ..." if len(remaining) > 5 else "")
            self.stdout.write(f"kept the shell copies in {directory}: accounts made for another service's users "
                              f"remain ({shown})")
            return
        if dry_run:
            self.stdout.write(f"would remove the shell copies in {directory}")
            return
        shutil.rmtree(directory)
        if directory == sealed.DEFAULT_DIRECTORY and not any(directory.parent.iterdir()):
            directory.parent.rmdir()  # /var/lib/terminals, made for them alone
        self.stdout.write(f"removed the shell copies in {directory}")
