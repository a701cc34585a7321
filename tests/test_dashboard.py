"""The dashboard in a real browser: Debian's Chromium, headless, driven by Selenium through chromedriver, against
real servers. What the page shows is read from the page, and a terminal's text from xterm.js's own buffer."""

from __future__ import annotations

import functools
import http.server
import os
import random
import shutil
import tempfile
import threading
import uuid
from contextlib import contextmanager

import pytest
import requests
from django.contrib.auth import get_user_model
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from terminals.models import ApiKey, AuditEvent, Recording

from .client import Api
from .servers import KEYS_MADE
from .test_live import Live, refusal, run

WAIT = 30  # seconds: only so a broken page cannot hang the run
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def people(django_db_setup, django_db_blocker) -> dict[str, str]:
    """Users who log in with a password: two ordinary ones and a staff member."""
    made = {}
    with django_db_blocker.unblock():
        for role in ("alice", "bob", "lead"):
            username = f"web-{role}-{uuid.uuid4().hex[:6]}"
            get_user_model().objects.create_user(username=username, password=PASSWORD, is_staff=role == "lead")
            made[role] = username
    return made


@pytest.fixture(scope="module")
def browser(server):
    """One Chromium per deployment, headless, with the flags a machine without a network needs."""
    profile = tempfile.mkdtemp(prefix="chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def until(driver, condition, what: str, timeout: float = WAIT):
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda _: condition(), message=what)


def log_in(driver, url: str, username: str) -> None:
    driver.get("about:blank")
    driver.get(f"{url}/login/")
    driver.delete_all_cookies()  # whoever was logged in before
    driver.get(f"{url}/login/")
    driver.find_element(By.ID, "id_username").send_keys(username)
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    until(driver, lambda: driver.find_elements(By.CSS_SELECTOR, "header.bar"), "the page after logging in")


def screen_text(driver) -> str:
    """The emulator's whole buffer (scrollback and screen), as xterm.js holds it."""
    return driver.execute_script(
        "const b = window.dashboardTerminal.buffer.active; const lines = [];"
        "for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));"
        "return lines.join('\\n');")


def snap(driver, name: str) -> None:
    """With DASHBOARD_SCREENSHOTS=<folder>, saves the page as <folder>/dashboard-<name>.png (docs/ has them)."""
    folder = os.environ.get("DASHBOARD_SCREENSHOTS")
    if folder:
        driver.save_screenshot(os.path.join(folder, f"dashboard-{name}.png"))


def console_problems(driver) -> list[str]:
    """Errors the page logged: JavaScript errors and Content-Security-Policy refusals."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]


def create_terminal(driver, url: str, name: str) -> str:
    driver.get(f"{url}/")
    driver.find_element(By.ID, "new-name").send_keys(name)
    driver.find_element(By.CSS_SELECTOR, "#create button[type=submit]").click()
    until(driver, lambda: "/terminals/" in driver.current_url, "the new terminal's page")
    until(driver, lambda: driver.find_element(By.ID, "state").text.startswith("live"), "the terminal to attach")
    return driver.current_url.rstrip("/").rsplit("/", 1)[1]


def type_into(driver, text: str) -> None:
    driver.find_element(By.CSS_SELECTOR, "#terminal textarea").send_keys(text)


def test_a_user_logs_in_creates_a_terminal_and_works_in_it(server, browser, people):
    """Log in, create a terminal, type an echo of a computed value and read the result in the emulator; resize
    the window and see stty size follow; no console error on the way."""
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    create_terminal(browser, server.url, "browser-work")
    first, second = random.randint(100, 999), random.randint(100, 999)
    type_into(browser, f"echo result-$(({first}*{second}))\n")
    until(browser, lambda: f"result-{first * second}" in screen_text(browser), "the command's output in the emulator")
    type_into(browser, "ls -la --color=always /\n")
    until(browser, lambda: " usr" in screen_text(browser), "a listing")
    snap(browser, "terminal")
    type_into(browser, "stty size\n")
    until(browser, lambda: _stty_sizes(screen_text(browser)), "stty size's answer")
    before = _stty_sizes(screen_text(browser))[-1]
    browser.set_window_size(900, 700)
    until(browser, lambda: browser.execute_script("return window.dashboardTerminal.cols") < before[1],
          "the emulator to fit the smaller window")
    cols, rows = browser.execute_script("return [window.dashboardTerminal.cols, window.dashboardTerminal.rows]")
    type_into(browser, "clear; stty size\n")
    until(browser, lambda: (rows, cols) in _stty_sizes(screen_text(browser)), f"stty size to say {rows} {cols}")
    assert console_problems(browser) == []


def _stty_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and all(part.isdigit() for part in parts):
            sizes.append((int(parts[0]), int(parts[1])))
    return sizes


@pytest.mark.embedded_only("the reconnection is the page's own; the split socket path is covered above")
def test_a_dropped_connection_resumes_with_nothing_lost_or_repeated(server, browser, people):
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    create_terminal(browser, server.url, "browser-resume")
    type_into(browser, "for n in $(seq 1 40); do echo line-$n; sleep 0.05; done; echo done-$((6*7))\n")
    until(browser, lambda: "line-5" in screen_text(browser), "the loop to start")
    browser.execute_script("window.dashboardSocket.close()")
    until(browser, lambda: "done-42" in screen_text(browser), "the loop's end after reconnecting")
    text = screen_text(browser)
    printed = [line for line in text.splitlines() if line.startswith("line-")]
    assert printed == [f"line-{n}" for n in range(1, 41)], printed
    assert console_problems(browser) == []


@pytest.mark.embedded_only("staff watching is one access rule, the same in both deployments")
def test_staff_watch_a_users_terminal_read_only_and_the_look_is_audited(server, browser, people, orm):
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    terminal = create_terminal(browser, server.url, "watched")
    type_into(browser, "echo before-watch\n")
    until(browser, lambda: "before-watch" in screen_text(browser), "alice's output")
    log_in(browser, server.url, people["lead"])
    browser.get(f"{server.url}/?owner={people['alice']}")
    until(browser, lambda: terminal in browser.page_source, "alice's terminal in the staff list")
    snap(browser, "terminals")
    browser.get(f"{server.url}/terminals/{terminal}/")
    until(browser, lambda: browser.find_element(By.ID, "state").text == "live, read-only", "the read-only view")
    until(browser, lambda: "before-watch" in screen_text(browser), "alice's output in the staff view")
    type_into(browser, "echo typed-by-staff\n")
    assert AuditEvent.objects.filter(terminal_id=terminal, action="attach", username=people["lead"]).exists()
    assert not AuditEvent.objects.filter(terminal_id=terminal, action="input", username=people["lead"]).exists()
    assert "typed-by-staff" not in screen_text(browser)
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-signal]")
    assert console_problems(browser) == []


@contextmanager
def page_on_another_port(html: str):
    """A tiny web server on another port of 127.0.0.1 (as a user's own `python3 -m http.server` would be), serving
    one page; yields its URL."""
    folder = tempfile.mkdtemp(prefix="other-port-")
    with open(os.path.join(folder, "index.html"), "w") as page:
        page.write(html)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}/index.html"
    finally:
        site.shutdown()
        site.server_close()
        shutil.rmtree(folder, ignore_errors=True)


HIJACKING_PAGE = """<!doctype html><title>loading</title><script>
const socket = new WebSocket("{socket}");
socket.onopen = () => socket.send(JSON.stringify({{type: "input", data: "echo {marker}\\r"}}));
socket.onmessage = (message) => {{
  const frame = JSON.parse(message.data);
  if (frame.type === "attached") {{
    document.title = "attached " + frame.readOnly;
    socket.send(JSON.stringify({{type: "input", data: "echo {marker}\\r"}}));
  }}
}};
socket.onclose = (closed) => {{
  if (!document.title.startsWith("attached")) document.title = "closed " + closed.code;
}};
</script>"""


@pytest.mark.embedded_only("the Origin rule is the live consumer's, the same in both deployments")
def test_a_page_on_another_port_of_the_same_host_cannot_attach_with_the_dashboards_login(server, browser, people,
                                                                                            orm):
    """Alice, logged in to the dashboard, opens a page served from another port of 127.0.0.1 whose script opens a
    WebSocket to her terminal: Chromium sends her session cookie (the same site), the service refuses the origin
    with 4403 before any frame, audits it, and nothing the page sent reaches the terminal."""
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    terminal = create_terminal(browser, server.url, "hijack-target")
    marker = f"hijacked-{uuid.uuid4().hex[:8]}"
    socket = f"{server.url.replace('http://', 'ws://', 1)}/ws/terminals/{terminal}/"
    with page_on_another_port(HIJACKING_PAGE.format(socket=socket, marker=marker)) as page:
        assert page.rsplit(":", 1)[1] != server.url.rsplit(":", 1)[1]
        browser.get(page)
        until(browser, lambda: browser.title not in ("loading", ""), "the page's socket to attach or close")
        outcome = browser.title
    assert outcome == "closed 4403", outcome
    refused = AuditEvent.objects.filter(terminal_id=terminal, action="attach", username=people["alice"],
                                        outcome="FORBIDDEN")
    assert refused.count() == 1
    alice = Api(server.url, _key_for(people["alice"]))
    assert marker not in alice.full_output(terminal)
    assert not [row for row in AuditEvent.objects.filter(terminal_id=terminal) if marker in str(row.details)]
    console_problems(browser)  # the refused socket's console error belongs to this page, not the next test's


@pytest.mark.embedded_only("the access rule is the core's, the same in both deployments")
def test_bob_sees_none_of_alices_terminals_keys_or_audit_rows(server, browser, people, orm):
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    terminal = create_terminal(browser, server.url, "alice-private")
    alice = get_user_model().objects.get(username=people["alice"])
    record, key = ApiKey.objects.create_key(user=alice, name="alice-web-key")
    KEYS_MADE.append(key)
    log_in(browser, server.url, people["bob"])
    for page in ("/?status=all", "/keys/", "/audit/"):
        browser.get(f"{server.url}{page}")
        source = browser.page_source
        assert terminal not in source and terminal[:8] not in source and record.display_prefix not in source, page
        assert people["alice"] not in source, page
    for page in (f"/terminals/{terminal}/", f"/terminals/{terminal}/output.txt", f"/terminals/{terminal}/commands"):
        answer = requests.get(f"{server.url}{page}", cookies=_cookies(browser), timeout=10)
        assert answer.status_code == 404, (page, answer.status_code)
    unknown = requests.get(f"{server.url}/terminals/{uuid.uuid4()}/", cookies=_cookies(browser), timeout=10)
    assert unknown.status_code == 404


def _key_for(username: str) -> str:
    record, key = ApiKey.objects.create_key(user=get_user_model().objects.get(username=username), name="ws")
    KEYS_MADE.append(key)
    return key


def _cookies(driver) -> dict:
    return {cookie["name"]: cookie["value"] for cookie in driver.get_cookies()}


@pytest.mark.embedded_only("the audit page reads the database, the same in both deployments")
def test_the_audit_filters_and_the_chain_check(server, browser, people, orm):
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    terminal = create_terminal(browser, server.url, "audited")
    browser.get(f"{server.url}/audit/?terminal={terminal}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#audit tbody tr")
    actions = {row.find_elements(By.TAG_NAME, "td")[5].text for row in rows}
    assert "create" in actions and actions <= {"create", "attach", "detach", "resize", "input"}, actions
    Select(browser.find_element(By.ID, "f-action")).select_by_visible_text("create")
    browser.find_element(By.CSS_SELECTOR, ".filters button[type=submit]").click()
    until(browser, lambda: "action=create" in browser.current_url, "the filtered page")
    rows = browser.find_elements(By.CSS_SELECTOR, "#audit tbody tr")
    assert rows and all(row.find_elements(By.TAG_NAME, "td")[5].text == "create" for row in rows)
    assert not browser.find_elements(By.CSS_SELECTOR, "form[action$='/audit/verify']")  # staff only
    log_in(browser, server.url, people["lead"])
    browser.get(f"{server.url}/audit/")
    browser.find_element(By.CSS_SELECTOR, "form[action$='/audit/verify'] button").click()
    until(browser, lambda: "The audit trail is intact" in browser.page_source, "the chain check's result")
    snap(browser, "audit")
    assert console_problems(browser) == []


@pytest.mark.embedded_only("keys are the core's, the same in both deployments")
def test_a_key_made_in_the_page_works_against_the_api_and_is_shown_once(server, browser, people):
    browser.set_window_size(390, 844)  # a phone
    log_in(browser, server.url, people["alice"])
    browser.get(f"{server.url}/keys/")
    browser.find_element(By.ID, "key-name").send_keys("from-the-browser")
    browser.find_element(By.CSS_SELECTOR, "#new-key-form button[type=submit]").click()
    key = until(browser, lambda: browser.find_elements(By.ID, "new-key"), "the new key")[0].text
    KEYS_MADE.append(key)
    assert key in browser.find_element(By.ID, "curl-line").text
    snap(browser, "keys")
    answer = requests.get(f"{server.url}/api/terminals", headers={"X-API-Key": key}, timeout=10)
    assert answer.status_code == 200, answer.text
    browser.refresh()
    assert key not in browser.page_source and browser.find_elements(By.CSS_SELECTOR, "#keys tbody tr")
    row = next(row for row in browser.find_elements(By.CSS_SELECTOR, "#keys tbody tr") if "from-the-browser" in row.text)
    row.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(browser, lambda: "revoked" in browser.page_source, "the revocation")
    answer = requests.get(f"{server.url}/api/terminals", headers={"X-API-Key": key}, timeout=10)
    assert answer.status_code == 401
    assert console_problems(browser) == []


@pytest.mark.embedded_only("the pages' headers are the same in both deployments")
def test_pages_carry_a_strict_policy_and_need_a_login(server, browser, people):
    answer = requests.get(f"{server.url}/", allow_redirects=False, timeout=10)
    assert answer.status_code == 302 and answer.headers["Location"].startswith("/login/")
    login = requests.get(f"{server.url}/login/", timeout=10)
    policy = login.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src", 1)[1].split(";")[0]
    assert "frame-ancestors 'none'" in policy and login.headers["X-Frame-Options"] == "DENY"
    forged = requests.post(f"{server.url}/terminals/new", data={"kind": "shell"}, timeout=10, allow_redirects=False)
    assert forged.status_code in (302, 403)  # no session: to the login page; a session without the token: 403
    log_in(browser, server.url, people["lead"])
    for page in ("/", "/audit/", "/keys/", "/workers/"):
        browser.get(f"{server.url}{page}")
        until(browser, lambda: browser.find_elements(By.TAG_NAME, "h1"), f"{page} to render")
    assert "Users separated" in browser.page_source
    assert console_problems(browser) == []


@pytest.mark.embedded_only("sharing is the core's access rule, the same in both deployments")
def test_an_owner_shares_a_read_only_look_and_takes_it_back(server, browser, people, orm, keys):
    """Alice lets Bob watch one terminal: he finds it under "Shared with you" and sees it live, but cannot type,
    download its output or attach to it interactively; when she takes it back, it answers him 404 again."""
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    terminal = create_terminal(browser, server.url, "shared-look")
    type_into(browser, "echo shared-$((20+1))\n")
    until(browser, lambda: "shared-21" in screen_text(browser), "alice's output")
    browser.find_element(By.ID, "share-user").send_keys(people["bob"])
    browser.find_element(By.CSS_SELECTOR, "#share button[type=submit]").click()
    until(browser, lambda: "can now watch this terminal" in browser.page_source, "the share")
    assert AuditEvent.objects.filter(terminal_id=terminal, action="share", username=people["alice"]).exists()

    log_in(browser, server.url, people["bob"])
    browser.find_element(By.LINK_TEXT, "shared-look").click()
    until(browser, lambda: browser.find_element(By.ID, "state").text == "live, read-only", "bob's read-only view")
    until(browser, lambda: "shared-21" in screen_text(browser), "alice's output in bob's view")
    type_into(browser, "echo from-bob\n")
    for page in ("output.txt", "commands", "watchers"):
        answer = requests.get(f"{server.url}/terminals/{terminal}/{page}", cookies=_cookies(browser), timeout=10)
        assert answer.status_code == 404, page
    assert not AuditEvent.objects.filter(terminal_id=terminal, action="input", username=people["bob"]).exists()
    bob_key = _key_for(people["bob"])

    async def view() -> dict:
        viewing = await Live.open(server.url, terminal, bob_key, mode="view")
        await viewing.close()
        return viewing.attached

    assert run(view())["readOnly"] is True
    # Typing needs the terminal itself: an interactive attach answers as for an unknown terminal.
    assert run(refusal(server.url, terminal, {"X-API-Key": bob_key})) == 4404

    log_in(browser, server.url, people["alice"])
    browser.get(f"{server.url}/terminals/{terminal}/")
    until(browser, lambda: "from-bob" not in screen_text(browser) and "shared-21" in screen_text(browser), "alice's view")
    assert people["bob"] in browser.find_element(By.CSS_SELECTOR, ".side").text  # who it is shared with
    browser.find_element(By.CSS_SELECTOR, f"button[aria-label='Stop sharing with {people['bob']}']").click()
    until(browser, lambda: "can no longer watch" in browser.page_source, "the share taken back")
    log_in(browser, server.url, people["bob"])
    answer = requests.get(f"{server.url}/terminals/{terminal}/", cookies=_cookies(browser), timeout=10)
    assert answer.status_code == 404
    assert console_problems(browser) == []


@pytest.mark.embedded_only("users are the core's, the same in both deployments")
def test_staff_make_a_user_who_logs_in_and_disable_them(server, browser, people):
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["lead"])
    browser.get(f"{server.url}/keys/")
    newcomer = f"web-new-{uuid.uuid4().hex[:6]}"
    browser.find_element(By.ID, "new-username").send_keys(newcomer)
    browser.find_element(By.CSS_SELECTOR, "#new-user-form button[type=submit]").click()
    password = until(browser, lambda: browser.find_elements(By.ID, "new-password"), "the new password")[0].text
    browser.refresh()
    assert password not in browser.page_source  # shown once
    row = browser.find_element(By.CSS_SELECTOR, f"#users tr[data-user='{newcomer}']")
    row.find_element(By.CSS_SELECTOR, "button[value=disable]").click()
    until(browser, lambda: "disabled: their keys" in browser.page_source, "the user disabled")
    session = requests.Session()
    page = session.get(f"{server.url}/login/", timeout=10)
    token = session.cookies["csrftoken"]
    answer = session.post(f"{server.url}/login/", data={"username": newcomer, "password": password,
                                                        "csrfmiddlewaretoken": token},
                          headers={"Referer": page.url}, timeout=10, allow_redirects=False)
    assert answer.status_code == 200 and "do not match" in answer.text  # refused: disabled
    row = browser.find_element(By.CSS_SELECTOR, f"#users tr[data-user='{newcomer}']")
    row.find_element(By.CSS_SELECTOR, "button[value=enable]").click()
    until(browser, lambda: "enabled again" in browser.page_source, "the user enabled")
    answer = session.post(f"{server.url}/login/", data={"username": newcomer, "password": password,
                                                        "csrfmiddlewaretoken": session.cookies["csrftoken"]},
                          headers={"Referer": page.url}, timeout=10, allow_redirects=False)
    assert answer.status_code == 302  # logged in
    assert console_problems(browser) == []


def player_lines(driver) -> list[str]:
    """The lines the recording player shows now (each coloured run is a span of its own, so no .text)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#player .ap-term-text .ap-line')].map(l => l.textContent.trimEnd())")


@pytest.mark.embedded_only("the player reads the file as REST does; both deployments serve it in tests/test_recording.py")
def test_a_recorded_terminal_plays_back_in_the_player_and_opens_from_its_audit_rows(server, browser, people, orm):
    """Create a terminal with Record ticked, work in it, end it; the Recordings page lists it for its owner and for
    staff, the player (vendored asciinema-player, under the player page's policy) shows its text at the end, and
    its audit rows link to it. Another user's recording page and file answer 404."""
    browser.set_window_size(1280, 900)
    log_in(browser, server.url, people["alice"])
    browser.get(f"{server.url}/")
    browser.find_element(By.ID, "new-name").send_keys("recorded-in-browser")
    browser.find_element(By.ID, "new-record").click()
    browser.find_element(By.CSS_SELECTOR, "#create button[type=submit]").click()
    until(browser, lambda: "/terminals/" in browser.current_url, "the new terminal's page")
    until(browser, lambda: browser.find_element(By.ID, "state").text.startswith("live"), "the terminal to attach")
    terminal = browser.current_url.rstrip("/").rsplit("/", 1)[1]
    assert "This terminal is recorded" in browser.find_element(By.ID, "recorded").text
    value = random.randint(1000, 9999) * 7
    type_into(browser, f"printf '\\033[32mplayed-%s\\033[0m\\n' $(({value}/7*7))\n")
    until(browser, lambda: f"played-{value}" in screen_text(browser), "the output in the live terminal")
    type_into(browser, "exit\n")
    until(browser, lambda: "ended" in browser.find_element(By.ID, "state").text, "the terminal's end")
    until(browser, lambda: Recording.objects.filter(pk=terminal, finished__isnull=False).exists(), "the seal")

    browser.get(f"{server.url}/recordings/")
    row = browser.find_element(By.CSS_SELECTOR, f"#recordings tr[data-terminal='{terminal}']")
    assert "sealed" in row.text
    row.find_element(By.TAG_NAME, "a").click()
    until(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#player .ap-term-text"), "the player")
    duration = browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; const player = document.getElementById('player').player;"
        "player.seek('100%').then(() => done(player.getDuration()));")
    assert duration > 0
    until(browser, lambda: any(f"played-{value}" in line for line in player_lines(browser)),
          "the recorded output in the player")
    snap(browser, "recording")
    assert console_problems(browser) == []

    browser.get(f"{server.url}/audit/?terminal={terminal}")
    link = browser.find_element(By.CSS_SELECTOR, "#audit a.recording-link")
    assert link.get_attribute("href").endswith(f"/recordings/{terminal}/")

    log_in(browser, server.url, people["bob"])
    for page in (f"/recordings/{terminal}/", f"/recordings/{terminal}.cast"):
        assert requests.get(f"{server.url}{page}", cookies=_cookies(browser), timeout=10).status_code == 404
    browser.get(f"{server.url}/recordings/")
    assert not browser.find_elements(By.CSS_SELECTOR, f"#recordings tr[data-terminal='{terminal}']")
    log_in(browser, server.url, people["lead"])
    browser.get(f"{server.url}/recordings/")
    assert browser.find_elements(By.CSS_SELECTOR, f"#recordings tr[data-terminal='{terminal}']")
    assert console_problems(browser) == []
