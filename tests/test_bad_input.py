"""Bad input that crashed a handler or left bad state (issue 29, part 4), on both deployments: a WebSocket frame
whose type is not a string, a malformed terminal id with mode=view, odd Accept headers on the API, the dashboard's
dates, redirects, user names and sizes, and what sharing tells about a user name."""

from __future__ import annotations

import re
import uuid

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from terminals.models import ApiKey, AuditEvent, TerminalSession, ViewGrant, key_prefix

from .conftest import make_key
from .servers import wait_for
from .test_live import Live, refusal, run

KNOWN_TYPES = ("input", "resize", "signal", "ack")


def viewers(api, terminal: str) -> int:
    response = api.get(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text
    return response.json()["data"]["viewers"]


def key_owner(key: str):
    return ApiKey.objects.select_related("user").get(prefix=key_prefix(key)).user


def detaches(terminal: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="detach"))


# The WebSocket


@pytest.mark.parametrize("mode", ["interactive", "view"])
def test_a_frame_type_that_is_not_a_string_gets_an_error_frame_and_leaves_no_ghost_viewer(server, alice, keys, orm,
                                                                                         mode):
    """{"type": ["input"]} and {"type": {"x": 1}} are answered with INVALID_INPUT naming the frame types, the
    connection stays open and usable, and once the client leaves the terminal's viewer count is back where it was,
    with a detach row on record."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    before = viewers(alice, terminal)
    query = {"mode": "view"} if mode == "view" else {}

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"], **query)
        errors = []
        for kind in (["input"], {"x": 1}, 7, None):
            await live.send(type=kind)
            errors.append(await live.next_of("error"))
        await live.send(type="ack", offset=0)
        if mode == "interactive":
            await live.send(type="input", data="echo alive-$((6*7))\r")
            await live.until_text("alive-42\r\n")
        await live.close()
        return errors, live

    errors, live = run(scenario())
    assert live.close_code is None  # the client closed; the server never did
    for error in errors:
        assert error["code"] == "INVALID_INPUT", error
        assert all(known in error["message"] for known in KNOWN_TYPES), error
    wait_for(lambda: viewers(alice, terminal) == before, 15, "the viewer count back to what it was")
    assert len(wait_for(lambda: detaches(terminal), 15, "the detach row")) == 1


def test_a_malformed_terminal_id_with_mode_view_is_an_audited_4404(server, orm):
    """/ws/terminals/not-a-uuid/?mode=view closes 4404 as without mode=view, and each refusal is an audit row."""
    user, key = make_key(name="malformed")

    async def scenario():
        return [await refusal(server.url, "not-a-uuid", {"X-API-Key": key}, **query) for query in ({"mode": "view"},
                                                                                                   {})]

    assert run(scenario()) == [4404, 4404]
    def refusal_rows():
        rows = list(AuditEvent.objects.filter(username=user.username, action="attach"))
        return rows if len(rows) == 2 else None

    rows = wait_for(refusal_rows, 15, "two refusal rows")
    assert [row.outcome for row in rows] == ["TERMINAL_NOT_FOUND"] * 2


# The API and its Accept header

ODD_ACCEPTS = ["text/plain", "text/html", "application/xml", "image/png", "text/html;q=0.9, application/xml;q=0.8"]


@pytest.mark.parametrize("accept", ODD_ACCEPTS)
def test_the_api_answers_json_whatever_the_accept_header_asks(server, alice, anonymous, accept, orm):
    """The API speaks JSON: an Accept header naming only other types gets the same JSON answer as without it, not a
    500 and not an INTERNAL_ERROR row (health without a key included)."""
    internal_errors = AuditEvent.objects.filter(outcome="INTERNAL_ERROR").count()
    for api, path, status in ((anonymous, "/api/health", (200, 503)), (alice, "/api/terminals", (200,)),
                              (anonymous, "/api/terminals", (401,)), (alice, "/api/audit", (200,))):
        response = api.get(path, headers={"Accept": accept})
        assert response.status_code in status, (path, response.status_code, response.text[:300])
        assert response.headers["Content-Type"].startswith("application/json"), path
        response.json()
    created = alice.post("/api/terminals", json={"command": "true"}, headers={"Accept": accept})
    assert created.status_code == 201, created.text[:300]
    alice.created.append(created.json()["data"]["terminalId"])
    assert AuditEvent.objects.filter(outcome="INTERNAL_ERROR").count() == internal_errors


def test_a_recording_is_served_whatever_the_accept_header_asks(alice):
    terminal = alice.create(command="printf", args=["recorded-bytes"], record=True)["terminalId"]
    wait_for(lambda: (alice.get(f"/api/terminals/{terminal}").json()["data"]["recording"] or {}).get("finished"), 15,
             "the recording sealed")
    for accept in ("text/html", "application/x-asciicast", "application/json", "*/*"):
        response = alice.get(f"/api/terminals/{terminal}/recording", headers={"Accept": accept})
        assert response.status_code == 200, (accept, response.text[:300])
        assert "recorded-bytes" in response.text, accept
    missing = alice.get(f"/api/terminals/{uuid.uuid4()}/recording", headers={"Accept": "text/html"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "TERMINAL_NOT_FOUND"


# The dashboard, through HTTP as a browser posts its forms


class Dashboard:
    """A logged-in requests session that posts forms with the page's CSRF token and the site's own Origin."""

    def __init__(self, url: str, user) -> None:
        login = Client()
        login.force_login(user)
        self.url, self.user = url, user
        self.http = requests.Session()
        self.http.cookies.set("sessionid", login.cookies["sessionid"].value)

    def get(self, path: str, **params) -> requests.Response:
        return self.http.get(f"{self.url}{path}", params=params, timeout=30, allow_redirects=False)

    def post(self, path: str, data: dict) -> requests.Response:
        if "csrftoken" not in self.http.cookies:
            assert self.get("/keys/").status_code == 200
        return self.http.post(f"{self.url}{path}", data={"csrfmiddlewaretoken": self.http.cookies["csrftoken"],
                                                          **data},
                              headers={"Origin": self.url, "Referer": f"{self.url}/"}, timeout=60,
                              allow_redirects=False)

    def messages(self, response: requests.Response) -> str:
        """The messages the page a POST redirected to shows."""
        assert response.status_code == 302, (response.status_code, response.text[-1000:])
        page = self.get(response.headers["Location"])
        assert page.status_code == 200
        return " ".join(re.findall(r'<ul class="messages"[^>]*>(.*?)</ul>', page.text, re.S))


def dashboard_user(url: str, *, staff: bool = False, name: str = "web") -> Dashboard:
    user = get_user_model().objects.create(username=f"{name}-{uuid.uuid4().hex[:8]}", is_staff=staff)
    return Dashboard(url, user)


@pytest.mark.parametrize("page", ["/audit/", "/recordings/"])
def test_a_date_filter_that_is_no_date_is_a_form_error(server, orm, page):
    web = dashboard_user(server.url)
    for since in ("2025-02-30T00:00", "garbage"):
        answer = web.get(page, since=since)
        assert answer.status_code == 200, (since, answer.status_code)
        assert "is not a date" in answer.text, since
    assert "is not a date" in web.get(page, until="garbage").text
    assert "is not a date" not in web.get(page, since="2025-02-28T00:00").text


def test_a_key_with_an_expiry_that_is_no_date_is_refused_and_not_made(server, orm):
    web = dashboard_user(server.url)
    for expires in ("2025-02-30T00:00:00", "garbage"):
        answer = web.post("/keys/new", {"name": "bad-expiry", "expires": expires})
        shown = web.messages(answer)
        assert "Not created" in shown and "is not a date" in shown and expires in shown, shown
    assert not ApiKey.objects.filter(user=web.user).exists()
    assert not AuditEvent.objects.filter(action="key_create", details__subject=web.user.username).exists()
    made = web.post("/keys/new", {"name": "good-expiry", "expires": "2999-01-01T00:00"})
    assert made.status_code == 302
    record = ApiKey.objects.get(user=web.user)
    assert record.expires_at is not None and record.expires_at.year == 2999
    assert AuditEvent.objects.filter(action="key_create", details__subject=web.user.username).count() == 1
    ApiKey.objects.filter(user=web.user).update(revoked_at=record.created)


def test_ending_a_terminal_redirects_only_within_the_site(server, alice, orm, keys):
    owner = key_owner(keys["alice"])
    web = Dashboard(server.url, owner)
    for next_page, expected in (("javascript:alert(1)", "/"), ("https://evil.example/", "/"),
                                ("//evil.example/", "/"), ("/audit/", "/audit/")):
        terminal = alice.create(command="sleep", args=["100"])["terminalId"]
        answer = web.post(f"/terminals/{terminal}/end", {"signal": "SIGKILL", "next": next_page})
        assert answer.status_code == 302, (next_page, answer.status_code)
        assert answer.headers["Location"] == expected, (next_page, answer.headers["Location"])
        assert TerminalSession.objects.get(pk=terminal).status != "active"


def test_a_user_name_with_a_slash_leaves_the_staff_pages_working(server, orm):
    lead = dashboard_user(server.url, staff=True, name="lead")
    odd = get_user_model().objects.create(username=f"team/{uuid.uuid4().hex[:6]}")
    page = lead.get("/keys/")
    assert page.status_code == 200, page.text[-2000:]
    action = re.search(rf'action="([^"]*{re.escape(odd.username.split("/")[1])}[^"]*)"', page.text)[1]
    answer = lead.post(action, {"change": "disable"})
    assert "disabled" in lead.messages(answer)
    odd.refresh_from_db()
    assert odd.is_active is False


def test_the_create_form_refuses_a_size_over_the_limits(server, orm):
    web = dashboard_user(server.url)
    for size in ({"rows": "900"}, {"cols": "1001"}, {"rows": "0"}, {"cols": "many"}):
        answer = web.post("/terminals/new", {"kind": "shell", "name": "too-big", **size})
        shown = web.messages(answer)
        assert "Not created" in shown, (size, shown)
    assert not TerminalSession.objects.filter(owner=web.user).exists()
    shown = web.messages(web.post("/terminals/new", {"kind": "shell", "rows": "900"}))
    assert "500" in shown  # the limit, so the user knows what to type instead


# Sharing tells nothing about who exists


def test_sharing_answers_the_same_for_an_unknown_user_the_owner_and_a_disabled_user(server, orm, alice, keys):
    owner = key_owner(keys["alice"])
    web = Dashboard(server.url, owner)
    terminal = alice.create(command="sleep", args=["100"])["terminalId"]
    disabled = get_user_model().objects.create(username=f"gone-{uuid.uuid4().hex[:6]}", is_active=False)
    unknown = f"nobody-{uuid.uuid4().hex[:6]}"
    said = {}
    for name in (unknown, owner.username, disabled.username):
        answer = web.post(f"/terminals/{terminal}/share", {"user": name})
        said[name] = (answer.status_code, web.messages(answer).replace(name, "NAME"))
    assert len(set(said.values())) == 1, said
    assert "Not shared" in said[unknown][1]
    assert not AuditEvent.objects.filter(terminal_id=terminal, action="share").exists()
    assert not ViewGrant.objects.filter(terminal_id=terminal).exists()


def test_the_dashboard_answers_an_unknown_or_foreign_terminal_with_its_own_html_page(server, orm, bob):
    """A terminal that is not there and another user's get the same HTML 404 page in the dashboard's style, saying
    so, with the way back and the strict headers; so does any unknown dashboard path. API paths keep the envelope."""
    foreign = bob.create(command="sleep", args=["100"])["terminalId"]
    web = dashboard_user(server.url)
    pages = [f"/terminals/{uuid.uuid4()}/", f"/terminals/{foreign}/", f"/terminals/{foreign}/output.txt",
             f"/recordings/{foreign}/", "/terminals/not-a-terminal/", "/nowhere"]
    for page in pages:
        answer = web.get(page)
        assert answer.status_code == 404, (page, answer.status_code)
        assert answer.headers["Content-Type"].startswith("text/html"), (page, answer.headers["Content-Type"])
        assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'"), page
        assert answer.headers["X-Frame-Options"] == "DENY", page
        assert '<a href="/">Back to your terminals</a>' in answer.text, page
        assert "No endpoint at" not in answer.text, page
    assert "does not exist, or it is another user&#x27;s and not shared with you" in web.get(pages[1]).text
    assert web.get(pages[0]).text.count("Terminal not found") == 2  # the title and the heading
    assert "There is no page at /nowhere." in web.get("/nowhere").text
    api = web.get("/api/nowhere")
    assert api.status_code == 404 and api.json()["error"]["code"] == "NOT_FOUND"
