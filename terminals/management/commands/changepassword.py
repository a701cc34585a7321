"""Django's changepassword, with the change written to the audit trail (never the password itself)."""

import getpass

from django.contrib.auth.management.commands import changepassword

from terminals import keys


class Command(changepassword.Command):
    help = changepassword.Command.help + " The change is written to the audit trail."

    def handle(self, *args, **options):
        said = super().handle(*args, **options)  # raises CommandError when nothing was changed
        username = options["username"] or getpass.getuser()
        keys.password_changed(keys.command_line_actor("changepassword"), username)
        return said
