"""The WebSocket floor: a channels consumer under daphne that answers each input frame with an output frame of the
same text, at once, with no terminal, worker or channel layer behind it. Against terminado's whole keystroke echo
(figure 2) it shows what daphne, autobahn and channels alone cost a key."""

import json

from channels.generic.websocket import AsyncWebsocketConsumer


class EchoFloor(AsyncWebsocketConsumer):
    async def connect(self):
        self.offset = 0
        await self.accept()
        await self.send(json.dumps({"type": "attached", "fromByte": 0}))

    async def receive(self, text_data=None, bytes_data=None):
        frame = json.loads(text_data)
        if frame.get("type") != "input":
            return
        data = frame["data"]
        start, self.offset = self.offset, self.offset + len(data.encode())
        await self.send(json.dumps({"type": "output", "data": data, "offset": start, "next": self.offset}))
