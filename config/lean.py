"""Optional packages the service's own processes never use, kept out of their memory.

Libraries import some packages only because they are installed: Twisted loads pyOpenSSL for TLS, which the
service leaves to a proxy; autobahn loads click for command-line helpers; DRF loads requests (installed with the
test and benchmark tools) for a test client. Together 12 MB of the embedded server's 94 (bench/ANALYSIS.md).
autobahn also loads cbor2 for WAMP's serializers (1 MB, bench figure 6); daphne speaks plain WebSockets, never WAMP.
A None entry in sys.modules makes such an optional import fail, and the library goes on without it.
Others are needed only by features the service never uses, and load on first use instead: autobahn's WAMP
authentication (autobahn.wamp.auth), which daphne's WebSockets never call, imports cryptography and with it a copy
of OpenSSL, 6 MB at start (bench figure 6).
Only `serve` and `terminal_worker` do this (manage.py): tests and other commands keep every package.
"""

import importlib.abc
import importlib.util
import sys

UNUSED = ("OpenSSL", "requests", "click", "cbor2")
ON_FIRST_USE = ("autobahn.wamp.auth",)
SERVICE_COMMANDS = ("serve", "terminal_worker")


class OnFirstUse(importlib.abc.MetaPathFinder):
    """Finds the modules of ON_FIRST_USE as the other finders do, with a loader that runs a module's code only when
    one of its attributes is first read (importlib.util.LazyLoader): importing it costs nothing until then."""

    def find_spec(self, name, path, target=None):
        if name not in ON_FIRST_USE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


def leave_out_unused(argv: list[str]) -> None:
    if argv[1:2] and argv[1] in SERVICE_COMMANDS:
        for name in UNUSED:
            sys.modules.setdefault(name, None)
        sys.meta_path.insert(0, OnFirstUse())
