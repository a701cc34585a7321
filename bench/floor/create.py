"""The create floor: the least a create and its first prompt can cost on this stack with the records the service
keeps. Against it, figure 5 shows how much of a create is the service's own work.

POST /api/terminals authenticates the key with one indexed query, inserts the terminal's row before anything
starts, spawns bash on a PTY in the request's own thread (as bench/reference.py's limit does), then writes the pid
and the create's audit row in one transaction and answers 201 with the id. /ws/floor/<id>/ finds the key and the
terminal and writes the attach's audit row in one trip to a database thread, answers "attached", and sends what the
PTY printed. The rows are the service's own models, the audit rows chained as the service chains them: three
durable writes, as in a create of the service. What the floor leaves out is the service's: validating the request,
the account, directory and environment, the channel layer to a worker and back, the worker's ordering of its
database work, the shell's hooks and confinement, and the attach's request to the worker.
"""

import asyncio
import fcntl
import json
import os
import struct
import subprocess
import termios
import uuid

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import transaction
from rest_framework.response import Response
from rest_framework.views import APIView

from terminals.models import AuditEvent, TerminalSession

from .keys import OneQueryKey, key_record

_masters: dict[str, int] = {}  # terminal id -> its PTY's master (the floor's processes end with it)
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("FLOOR_SHELL_HOME", "/"),
       "TERM": "xterm-256color", "LANG": "C.UTF-8"}


class CreateFloor(APIView):
    authentication_classes = [OneQueryKey]
    permission_classes = []
    throttle_classes = []

    def post(self, request):
        terminal_id = uuid.uuid4()
        with transaction.atomic():  # the row before anything starts
            TerminalSession.objects.create(id=terminal_id, owner=request.user, api_key=request.auth, shell="bash",
                                           cwd=ENV["HOME"])
        master, pid = _spawn()
        with transaction.atomic():  # the pid and the create's audit row
            TerminalSession.objects.filter(pk=terminal_id).update(pid=pid)
            AuditEvent.objects.create(user=request.user, username=request.user.get_username(), action="create",
                                      terminal_id=terminal_id, outcome="ok", details={"pid": pid})
        _masters[str(terminal_id)] = master
        return Response({"success": True, "data": {"terminalId": str(terminal_id)}}, status=201)


def _spawn() -> tuple[int, int]:
    master, slave = os.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        process = subprocess.Popen(["bash"], stdin=slave, stdout=slave, stderr=slave, env=ENV, cwd=ENV["HOME"],
                                   close_fds=True, restore_signals=True, start_new_session=True)
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return master, process.pid


class AttachFloor(AsyncWebsocketConsumer):
    async def connect(self):
        terminal_id = self.scope["url_route"]["kwargs"]["terminal_id"]
        key = dict(self.scope["headers"]).get(b"x-api-key", b"").decode("latin-1")
        self.fd = None
        await self.accept()
        if not await database_sync_to_async(_attach_on_record, thread_sensitive=False)(key, terminal_id):
            await self.close(code=4404)
            return
        await self.send(json.dumps({"type": "attached", "fromByte": 0}))
        self.fd, self.offset = _masters[terminal_id], 0
        asyncio.get_running_loop().add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: the shell ended
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.fd)
            return
        start, self.offset = self.offset, self.offset + len(data)
        frame = {"type": "output", "data": data.decode("utf-8", errors="replace"), "offset": start, "next": self.offset}
        asyncio.ensure_future(self.send(json.dumps(frame)))

    async def disconnect(self, code):
        if self.fd is not None:
            asyncio.get_running_loop().remove_reader(self.fd)


def _attach_on_record(key: str, terminal_id: str) -> bool:
    record = key_record(key)
    if record is None or not TerminalSession.objects.filter(pk=terminal_id, owner=record.user).exists():
        return False
    AuditEvent.objects.create(user=record.user, username=record.user.get_username(), action="attach",
                              terminal_id=terminal_id, outcome="ok", details={"mode": "interactive"})
    return True
