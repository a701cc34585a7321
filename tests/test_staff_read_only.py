"""Staff see every terminal but type only into their own: on another user's terminal, input, commands, resize and
signals answer 403 FORBIDDEN on REST and MCP, an interactive WebSocket attach (key or cookie) is refused with 4403
after an error frame saying to use mode=view, every refusal is audited under the staff member's name, and nothing
reaches the terminal. Watching (mode=view), reading and ending stay theirs; so does all of it on their own terminals."""

from __future__ import annotations

import asyncio
import json
import uuid

import websockets

from terminals.models import ApiKey, AuditEvent

from .test_live import Live, attach_audits, run, ws_url
from .test_mcp import connect, text

TYPING = [("input", {"input": "echo {marker}"}), ("commands", {"command": "echo {marker}", "timeoutMs": 5000}),
          ("resize", {"cols": 101, "rows": 31}), ("signal", {"signal": "SIGINT"})]


def username(key: str) -> str:
    return ApiKey.objects.for_key(key).user.username


async def refused_with_a_reason(base: str, terminal: str, headers: dict, marker: str) -> tuple[list[dict], int]:
    """Connects interactively, types at once, and returns the frames that came before the close, and its code.
    The refusal may close the connection before the typing is sent: then the send itself meets the close."""
    frames = []
    async with websockets.connect(ws_url(base, terminal), additional_headers=headers, max_size=None) as ws:
        try:
            await ws.send(json.dumps({"type": "input", "data": f"echo {marker}\r"}))
        except websockets.ConnectionClosed:
            pass  # the frames received before the close are still read below
        try:
            while True:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 15)))
                assert frames[-1]["type"] == "error", f"expected a refusal, got the frame {frames[-1]}"
        except websockets.ConnectionClosed as closed:
            return frames, closed.rcvd.code


def test_staff_cannot_type_resize_or_signal_another_users_terminal_over_rest(server, alice, staff, keys, orm):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.run(terminal, "echo ready") == "ready"
    marker = f"staff-typed-{uuid.uuid4().hex[:8]}"
    for path, body in TYPING:
        body = {name: value.format(marker=marker) if isinstance(value, str) else value for name, value in body.items()}
        answer = staff.post(f"/api/terminals/{terminal}/{path}", json=body)
        assert answer.status_code == 403, (path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "FORBIDDEN" and "mode=view" in error["message"], (path, error)
    # Reading and watching stay open to staff.
    assert staff.get(f"/api/terminals/{terminal}/output").status_code == 200
    record = alice.get(f"/api/terminals/{terminal}").json()["data"]
    assert (record["cols"], record["rows"]) != (101, 31), record
    assert alice.run(terminal, "echo still-alive") == "still-alive"  # no SIGINT reached it either
    assert marker not in alice.full_output(terminal)
    refused = AuditEvent.objects.filter(terminal_id=terminal, username=username(keys["staff"]), outcome="FORBIDDEN")
    assert refused.count() == len(TYPING)


def test_staff_attach_to_another_users_terminal_only_to_watch(server, alice, staff, keys, orm):
    """With a key: an interactive attach gets an error frame naming mode=view, then 4403, and its input never
    arrives; mode=view attaches read-only and refuses input frames. Each attach is audited."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.run(terminal, "echo ready") == "ready"
    marker = f"staff-live-{uuid.uuid4().hex[:8]}"

    async def scenario():
        refused = await refused_with_a_reason(alice.url, terminal, {"X-API-Key": keys["staff"]}, marker)
        watching = await Live.open(alice.url, terminal, keys["staff"], mode="view")
        await watching.send(type="input", data=f"echo {marker}\r")
        error = await watching.next_of("error")
        await watching.close()
        return refused, watching, error

    (frames, code), watching, error = run(scenario())
    assert code == 4403
    assert [frame["type"] for frame in frames] == ["error"], frames
    assert frames[0]["code"] == "FORBIDDEN" and "mode=view" in frames[0]["message"], frames
    assert watching.attached["readOnly"] is True
    assert error["code"] == "FORBIDDEN", error
    assert marker not in alice.full_output(terminal)
    staffs = attach_audits(terminal, username=username(keys["staff"]))
    assert sorted(row.outcome for row in staffs) == ["FORBIDDEN", "ok"]
    assert [row.details.get("mode") for row in staffs if row.outcome == "ok"] == ["view"]
    assert not [row for row in AuditEvent.objects.filter(terminal_id=terminal) if marker in json.dumps(row.details)]


def test_a_staff_browser_login_attaches_to_another_users_terminal_only_to_watch(server, alice, keys, orm):
    """The dashboard's cookie, from the service's own origin, is held to the same rule as a key."""
    from django.test import Client

    terminal = alice.create(shell="/bin/bash")["terminalId"]
    browser = Client()
    browser.force_login(ApiKey.objects.for_key(keys["staff"]).user)
    port = server.url.rsplit(":", 1)[1]
    headers = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}", "Origin": f"http://127.0.0.1:{port}"}
    marker = f"staff-cookie-{uuid.uuid4().hex[:8]}"

    async def scenario():
        refused = await refused_with_a_reason(alice.url, terminal, headers, marker)
        watching = await Live.open(alice.url, terminal, headers=headers, mode="view")
        await watching.close()
        return refused, watching

    (frames, code), watching = run(scenario())
    assert code == 4403 and frames[0]["code"] == "FORBIDDEN", (code, frames)
    assert watching.attached["readOnly"] is True
    assert marker not in alice.full_output(terminal)


def test_staff_work_in_their_own_terminals_and_still_end_anyones(server, alice, staff, keys):
    own = staff.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        live = await Live.open(staff.url, own, keys["staff"])
        await live.send(type="input", data="echo staff-own-$((6*7))\r")
        await live.until_text("staff-own-42\r\n")
        await live.close()
        return live

    assert run(scenario()).attached["readOnly"] is False
    assert staff.run(own, "echo rest-$((2*3))") == "rest-6"
    theirs = alice.create(shell="/bin/bash")["terminalId"]
    ended = staff.delete(f"/api/terminals/{theirs}", json={})
    assert ended.status_code == 200, ended.text
    assert alice.get(f"/api/terminals/{theirs}").json()["data"]["status"] != "active"


def test_staff_cannot_type_into_another_users_terminal_over_mcp(server, alice, keys, orm):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    marker = f"staff-mcp-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with connect(server.url, keys["staff"]) as client:
            return await client.call_tool("send_input", {"terminal_id": terminal, "text": f"echo {marker}"})

    answer = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert answer.is_error and "FORBIDDEN" in text(answer) and "mode=view" in text(answer), text(answer)
    assert marker not in alice.full_output(terminal)
