"""Starting the floor (bench/floor/) beside a running service, on its database and key."""

import socket
import sys

from tests import servers


def start(service, body_bytes: int):
    """daphne serving bench/floor on the service's own database (its key), with a body of body_bytes."""
    port = servers.free_port()
    env = servers.service_env(TERMINALS_DATA_DIR=service.data_dir, DJANGO_SETTINGS_MODULE="bench.floor.settings",
                              FLOOR_BODY_BYTES=str(max(0, body_bytes - 45)), TERMINALS_ACCESS_LOG="false",
                              FLOOR_SHELL_HOME=str(servers.TEST_HOME))
    process = servers.ServiceProcess("floor", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                               "bench.floor.asgi:application"], env)
    url = f"http://127.0.0.1:{port}"
    # The service's logging settings quiet daphne's own start-up lines: wait for the port to answer instead.
    servers.wait_for(lambda: _answers(url) or not process.alive(), servers.START_TIMEOUT, "the floor to answer")
    if not process.alive():
        raise RuntimeError(f"the floor exited:\n{process.log()[-2000:]}")
    return process, url


def stop(process) -> None:
    """Stops the floor and removes its log, as the service's own processes are (bench/service.py)."""
    process.stop()
    process.log_path.unlink(missing_ok=True)


def _answers(url: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=1):
            return True
    except OSError:
        return False
