"""Runs the whole service in one process (embedded mode): migrates, bootstraps a first key, serves on daphne."""

import asyncio
import importlib
import os
import secrets
import shlex
import signal
import socket
import sys
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from terminals import keys
from terminals.environment import separation_warning
from terminals.runtime import keeper_protocol
from terminals.runtime.keeping import KeeperLink, rehearse_if_asked


class Command(BaseCommand):
    help = "Serve the API with daphne and the terminal worker in this process."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.HOST, help="address to listen on (HOST, default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=settings.PORT, help="port (PORT, default 3001; 0 picks a free one)")
        parser.add_argument("--no-bootstrap", action="store_true", help="do not create a first admin key")

    def handle(self, *args, host, port, no_bootstrap, **options):
        if settings.TERMINALS["KEEPER"] and keeper_protocol.FD_VARIABLE not in os.environ:
            # This process becomes the keeper (runtime/keeper.py), which runs the server as its child and holds
            # its terminals and its listening socket, so that SIGHUP restarts it without ending either.
            os.execv(sys.executable, [sys.executable, "-m", "terminals.runtime.keeper", "--handover-seconds",
                                      str(settings.TERMINALS["KEEPER_HANDOVER_SECONDS"]), "--", sys.executable,
                                      *sys.argv])
        if os.environ.get(keeper_protocol.REHEARSAL_VARIABLE):
            importlib.import_module("config.asgi")  # the rehearsal loads everything the server will
        rehearse_if_asked()  # a rehearsal of the keeper's SIGHUP exits here, having checked every terminal
        call_command("migrate", interactive=False, verbosity=0)
        first = None if no_bootstrap else self.bootstrap()
        self.run_daphne(host, port, first)

    def bootstrap(self) -> tuple[str, str] | None:
        """On a first start, creates the admin user with a generated password and an API key, and returns both;
        None when users exist. Neither is kept anywhere but in the banner (the database has only hashes)."""
        users = get_user_model().objects
        if users.exists():
            return None
        password = secrets.token_urlsafe(12)
        actor = keys.command_line_actor("serve (first start)")
        admin = keys.create_user(actor, "admin", staff=True, password=password)
        admin.is_superuser = True
        admin.save(update_fields=["is_superuser"])
        return keys.create_key(actor, admin, name="bootstrap")[1], password

    def announce_first_start(self, key: str, password: str, url: str) -> None:
        python = _shown_path(sys.executable)
        self.stdout.write(
            "\nFirst start: created user 'admin' (staff). Both secrets below are shown once; keep them.\n\n"
            f"  API key:  {key}\n"
            f"  Web:      {url}/  (the dashboard; user admin, password {password}; the admin at /admin/)\n\n"
            "Try it (a shell in /tmp):\n\n"
            f"  curl -s -X POST {url}/api/terminals -H 'X-API-Key: {key}' "
            "-H 'Content-Type: application/json' -d '{\"cwd\": \"/tmp\"}'\n\n"
            f"API docs: {url}/api/docs/\n"
            f"More keys: {python} manage.py create_api_key USERNAME [--staff]\n"
            f"New admin password: {python} manage.py changepassword admin\n"
        )

    def warn_unseparated(self) -> None:
        warning = separation_warning()
        if warning:
            self.stdout.write(f"\n{warning}\n\n")

    def run_daphne(self, host: str, port: int, first: tuple[str, str] | None) -> None:
        from daphne.server import Server  # installs Twisted's asyncio reactor: import it first

        from daphne.access import AccessLogGenerator
        from twisted.internet import reactor

        from config.asgi import application
        from terminals.worker import embedded
        from terminals.worker.embedded import ensure_worker

        command = self

        class AnnouncingServer(Server):
            failed = False

            def listen_error(self, failure):
                AnnouncingServer.failed = True
                super().listen_error(failure)

            def listen_success(self, listening_port):
                super().listen_success(listening_port)
                url = f"http://{host}:{listening_port.getHost().port}"

                def announce():
                    if first is not None:
                        command.announce_first_start(*first, url)
                    command.warn_unseparated()
                    command.stdout.write(f"Listening on {url}")
                    command.stdout.flush()

                # Listening can succeed before the reactor runs, that is before its SIGTERM handler is in
                # place: announce once it runs, so whoever stops the server on seeing this line stops it cleanly.
                reactor.callWhenRunning(announce)

        def start_worker():
            ensure_worker(asyncio.get_event_loop())

        interface = host.replace(":", r"\:").strip("[]")
        endpoint = f"tcp:port={port}:interface={interface}"
        link = KeeperLink.from_environment()
        if link is not None:
            endpoint = kept_listener(link, host, port)
        server = AnnouncingServer(
            application=application,
            endpoints=[endpoint],
            signal_handlers=True,
            ready_callable=start_worker,
            application_close_timeout=5,
            action_logger=AccessLogGenerator(sys.stdout) if settings.ACCESS_LOG else None,
        )
        if link is not None:
            def hand_over(signum, frame):
                embedded.handing_over = True  # the shutdown hooks hand the terminals over instead of ending them
                reactor.callFromThread(reactor.stop)

            signal.signal(keeper_protocol.HANDOVER_SIGNAL, hand_over)
        server.run()
        sys.stdout.flush()
        if AnnouncingServer.failed:
            raise CommandError(f"cannot listen on {host}:{port}")


def _shown_path(executable: str) -> str:
    """The interpreter as an operator types it from the project folder: relative when it lies inside it."""
    project = Path(__file__).resolve().parents[3]
    try:
        relative = Path(executable).relative_to(project)
    except ValueError:
        return shlex.quote(executable)
    return shlex.quote(os.path.join(".", str(relative)) if not str(relative).startswith(".") else str(relative))


def kept_listener(link: KeeperLink, host: str, port: int) -> str:
    """The endpoint of the listening socket the keeper holds (bound by the first server it ran, on host:port), so
    every server it runs serves on the same port, and a connection made while none runs waits in its backlog."""
    fd = link.listener("http")
    if fd is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listening = socket.socket(family, socket.SOCK_STREAM)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host.strip("[]"), port))
        listening.listen(128)
        fd = listening.detach()
        link.hold_listener("http", fd)
    _adopting_endpoints()
    return f"adopted:fileno={fd}:family={'inet6' if ':' in host else 'inet'}"


def _adopting_endpoints() -> None:
    """daphne makes its endpoints from description strings; "adopted:fileno=N:family=F" serves on a listening
    socket this process already has (Twisted's AdoptedStreamServerEndpoint), which Twisted's parser lacks."""
    import daphne.server
    from twisted.internet.endpoints import AdoptedStreamServerEndpoint

    parse = daphne.server.serverFromString
    if getattr(parse, "adopting", False):
        return

    def server_from_string(reactor, description):
        if not description.startswith("adopted:"):
            return parse(reactor, description)
        fields = dict(part.split("=", 1) for part in description.split(":")[1:])
        family = socket.AF_INET6 if fields["family"] == "inet6" else socket.AF_INET
        return AdoptedStreamServerEndpoint(reactor, int(fields["fileno"]), family)

    server_from_string.adopting = True
    daphne.server.serverFromString = server_from_string
