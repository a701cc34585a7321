"""Optional packages the service's own processes never use, kept out of their memory.

Libraries import some packages only because they are installed: Twisted loads pyOpenSSL for TLS, which the
service leaves to a proxy; autobahn loads click for command-line helpers; DRF loads requests (installed with the
test and benchmark tools) for a test client. Together 12 MB of the embedded server's 94 (bench/ANALYSIS.md). A None entry in sys.modules makes such an optional import fail, and the library goes on without it.
Only `serve` and `terminal_worker` do this (manage.py): tests and other commands keep every package.
"""

import sys

UNUSED = ("OpenSSL", "requests", "click")
SERVICE_COMMANDS = ("serve", "terminal_worker")


def leave_out_unused(argv: list[str]) -> None:
    if argv[1:2] and argv[1] in SERVICE_COMMANDS:
        for name in UNUSED:
            sys.modules.setdefault(name, None)
