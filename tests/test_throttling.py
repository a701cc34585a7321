"""Per-key throttling: 429 RATE_LIMITED with Retry-After, a stricter rate for creation, shared across web processes."""

import pytest

from terminals.models import AuditEvent

from .client import Api
from .conftest import make_key
from .servers import start_embedded, start_split

RATES = {"TERMINALS_THROTTLE_RATE": "6/min", "TERMINALS_CREATE_THROTTLE_RATE": "2/min"}


@pytest.fixture(scope="module")
def throttled_server(django_db_setup):
    server = start_embedded(**RATES)
    yield server
    server.stop()


def test_key_over_its_rate_gets_429_with_retry_after(orm, throttled_server):
    """The request past the rate is refused with RATE_LIMITED and a Retry-After; another key is unaffected."""
    _, key = make_key()
    _, other_key = make_key()
    api, other = Api(throttled_server.url, key), Api(throttled_server.url, other_key)
    statuses = [api.get("/api/terminals").status_code for _ in range(6)]
    assert statuses == [200] * 6
    refused = api.get("/api/terminals")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "RATE_LIMITED"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert other.get("/api/terminals").status_code == 200
    assert AuditEvent.objects.filter(key_prefix=key.split(".")[0], outcome="RATE_LIMITED").exists() is True


def test_creation_has_its_own_stricter_rate(orm, throttled_server):
    """A key may create two terminals a minute here while its other requests still pass."""
    _, key = make_key()
    api = Api(throttled_server.url, key)
    try:
        api.create(shell="/bin/sh")
        api.create(shell="/bin/sh")
        refused = api.post("/api/terminals", json={"shell": "/bin/sh"})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "RATE_LIMITED"
        assert api.get("/api/terminals").status_code == 200
    finally:
        api.cleanup()


def test_health_is_never_throttled(throttled_server):
    """Health checks need no key and are not counted."""
    anonymous = Api(throttled_server.url, None)
    assert {anonymous.get("/api/health").status_code for _ in range(10)} == {200}


def test_split_web_processes_share_one_count(orm):
    """In split mode the count lives in Redis, so two web processes together allow the rate once."""
    server = start_split(webs=2, workers=1, **RATES)
    try:
        _, key = make_key()
        first, second = (Api(url, key) for url in server.urls)
        statuses = [(first if number % 2 else second).get("/api/terminals").status_code for number in range(6)]
        assert statuses == [200] * 6
        assert first.get("/api/terminals").status_code == 429
        assert second.get("/api/terminals").status_code == 429
    finally:
        server.stop()


def test_a_spoofed_forwarded_for_does_not_reset_the_count(orm, throttled_server):
    """No proxy is trusted by default: a new X-Forwarded-For on every request is still the same key's count."""
    _, key = make_key()
    api = Api(throttled_server.url, key)
    statuses = [
        api.get("/api/terminals", headers={"X-Forwarded-For": f"10.0.0.{number}", "X-Real-IP": f"10.1.0.{number}"})
        .status_code
        for number in range(7)
    ]
    assert statuses == [200] * 6 + [429]
    # The audit records the connection's address, not the claimed one.
    sources = set(AuditEvent.objects.filter(key_prefix=key.split(".")[0]).values_list("source", flat=True))
    assert sources and not any(source.startswith("10.") for source in sources)
