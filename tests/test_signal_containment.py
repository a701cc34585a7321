"""Signals reach a terminal's own processes and nothing else, however early they come.

Right after creation a terminal's first process has not made its own session yet: the PTY has no foreground
group (tcgetpgrp answers 0), and killpg(0, ...) would signal the service's own process group. These tests send
signals at that moment, many times, over REST and the WebSocket, and check that the service and another user's
terminal live on.
"""

from __future__ import annotations

import asyncio
import uuid

import requests

from terminals.models import AuditEvent

from .client import Api
from .servers import wait_for
from .test_live import Live, run, web_urls

ROUNDS = 50
COMMAND = {"command": "sleep", "args": ["100"]}
SHELL = {"shell": "/bin/bash"}


def signalled(terminal: str) -> bool:
    return AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="signal", outcome="ok").exists()


def end(api: Api, terminal: str) -> None:
    """Deletes the terminal now, so a user's hundred-terminal limit is never reached by the rounds."""
    response = api.delete(f"/api/terminals/{terminal}", params={"force": "true"})
    assert response.status_code in (200, 409), response.text
    api.created.remove(terminal)


def assert_service_unharmed(server, bob: Api, bystander: str) -> None:
    """Every process of the deployment runs, each web process says healthy, and bob's terminal still answers."""
    for process in server.processes:
        assert process.alive(), f"{process.name} died:\n{process.log()[-2000:]}"
    for url in web_urls(server):
        health = requests.get(f"{url}/api/health", timeout=10)
        assert health.status_code == 200 and health.json()["data"]["status"] == "healthy", health.text
    assert bob.run(bystander, "echo still-$((40+2))") == "still-42"


def test_rest_signals_right_after_creation_reach_only_the_new_terminal(orm, server, keys):
    """POST /signal at once after POST /terminals, 50 times each for a command and a shell terminal: every answer
    names the terminal's own process (never 0, 1 or the service), and the service and bob's terminal live on."""
    alice, bob = Api(server.url, keys["alice"]), Api(server.url, keys["bob"])
    service_pids = {process.pid for process in server.processes}
    try:
        bystander = bob.create(**SHELL)["terminalId"]
        assert bob.run(bystander, "echo ready-$((1+1))") == "ready-2"
        for body in (COMMAND, SHELL):
            for _ in range(ROUNDS):
                created = alice.create(**body)
                response = alice.post(f"/api/terminals/{created['terminalId']}/signal", json={"signal": "SIGTERM"})
                assert response.status_code in (200, 409), response.text  # 409: it ended before the signal came
                if response.status_code == 200:
                    group = response.json()["data"]["processGroup"]
                    assert group > 1 and group not in service_pids, response.text
                end(alice, created["terminalId"])
        assert_service_unharmed(server, bob, bystander)
    finally:
        alice.cleanup()
        bob.cleanup()


def test_websocket_signals_right_after_attaching_reach_only_the_new_terminal(orm, server, keys):
    """A signal frame sent as soon as the attached frame arrives, 50 times each for a command and a shell terminal:
    each is carried out (audited ok), and the service and bob's terminal live on."""
    alice, bob = Api(server.url, keys["alice"]), Api(server.url, keys["bob"])
    try:
        bystander = bob.create(**SHELL)["terminalId"]
        assert bob.run(bystander, "echo ready-$((1+1))") == "ready-2"

        async def rounds(body: dict) -> None:
            for _ in range(ROUNDS):
                terminal = (await asyncio.to_thread(alice.create, **body))["terminalId"]
                live = await Live.open(server.url, terminal, keys["alice"])
                await live.send(type="signal", signal="SIGTERM")
                await asyncio.to_thread(wait_for, lambda: signalled(terminal), 60, f"the signal to {terminal}")
                assert not [frame for frame in live.frames if frame["type"] == "error"], live.frames
                await live.close()
                await asyncio.to_thread(end, alice, terminal)

        for body in (COMMAND, SHELL):
            run(rounds(body), timeout=300)
        assert_service_unharmed(server, bob, bystander)
    finally:
        alice.cleanup()
        bob.cleanup()


def test_a_signal_right_after_creating_a_shell_finds_it_at_its_prompt(server, keys):
    """A shell signalled at once after its creation is signalled at its first prompt, where an interactive shell
    ignores SIGTERM and SIGQUIT: it lives on and runs the next command. (SIGINT would not end it either, but makes
    its line editor drop, when it gets to it, what was typed so far, so the command typed next could lose its start.)"""
    alice = Api(server.url, keys["alice"])
    try:
        for number in range(10):
            created = alice.create(**SHELL)
            for name in ("SIGTERM", "SIGQUIT"):
                response = alice.post(f"/api/terminals/{created['terminalId']}/signal", json={"signal": name})
                assert response.status_code == 200, response.text
                assert response.json()["data"]["processGroup"] == created["pid"]
            assert alice.run(created["terminalId"], f"echo round-{number}-$((2*21))") == f"round-{number}-42"
            end(alice, created["terminalId"])
    finally:
        alice.cleanup()
