"""ALLOWED_HOSTS and CORS_ORIGIN, through a real server started with them: a Host outside ALLOWED_HOSTS is refused,
and only the configured browser origins get CORS headers."""

from __future__ import annotations

import pytest
import requests

from .servers import start_embedded

SERVICE_HOST = "terminals.example.test"
ALLOWED_ORIGIN = "https://app.example.test"
OTHER_ORIGIN = "https://elsewhere.example.test"


@pytest.fixture(scope="module")
def configured_server(django_db_setup):
    """127.0.0.1 stays allowed so the tests can reach the server by its address."""
    server = start_embedded(ALLOWED_HOSTS=f"{SERVICE_HOST},127.0.0.1", CORS_ORIGIN=ALLOWED_ORIGIN)
    yield server
    server.stop()


def get(server, path: str, **headers: str) -> requests.Response:
    return requests.get(f"{server.url}{path}", headers=headers, timeout=30, allow_redirects=False)


def preflight(server, origin: str) -> requests.Response:
    """What a browser sends before a cross-origin request with an API key header."""
    return requests.options(f"{server.url}/api/terminals", timeout=30, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-api-key, content-type"})


def test_a_host_outside_allowed_hosts_is_refused(configured_server, keys):
    """A listed Host is answered; any other gets 400 in the error envelope and nothing from the API, with or without
    a valid key."""
    port = configured_server.url.rsplit(":", 1)[1]
    assert get(configured_server, "/api/health", Host=f"{SERVICE_HOST}:{port}").status_code == 200
    for host in ("elsewhere.example.test", f"{SERVICE_HOST}.elsewhere.test", "localhost"):
        refused = get(configured_server, "/api/health", Host=host)
        assert refused.status_code == 400, (host, refused.status_code)
        assert refused.json()["success"] is False  # the usual error envelope
        listed = get(configured_server, "/api/terminals", Host=host, **{"X-API-Key": keys["alice"]})
        assert listed.status_code == 400, (host, listed.status_code)
        assert "terminals" not in listed.text
    assert get(configured_server, "/api/health").status_code == 200  # the service goes on


def test_only_the_configured_origin_gets_cors_headers(configured_server):
    """The configured origin is allowed, by name and with the API key header; another origin gets no CORS header at
    all, so a browser keeps that page's scripts from reading the answer."""
    allowed = get(configured_server, "/api/health", Origin=ALLOWED_ORIGIN)
    assert allowed.headers.get("Access-Control-Allow-Origin") == ALLOWED_ORIGIN
    asked = preflight(configured_server, ALLOWED_ORIGIN)
    assert asked.status_code == 200
    assert asked.headers.get("Access-Control-Allow-Origin") == ALLOWED_ORIGIN
    assert "x-api-key" in asked.headers.get("Access-Control-Allow-Headers", "").lower()

    other = get(configured_server, "/api/health", Origin=OTHER_ORIGIN)
    assert other.status_code == 200  # the request itself is answered; the browser withholds it from the page
    assert not [name for name in other.headers if name.lower().startswith("access-control-")], other.headers
    asked = preflight(configured_server, OTHER_ORIGIN)
    assert not [name for name in asked.headers if name.lower().startswith("access-control-")], asked.headers


def test_by_default_any_origin_gets_cors_headers(embedded_server):
    """CORS_ORIGIN unset is `*`, as documented."""
    answer = get(embedded_server, "/api/health", Origin=OTHER_ORIGIN)
    assert answer.headers.get("Access-Control-Allow-Origin") == "*"
