"""Per-key throttling: 429 RATE_LIMITED with Retry-After, a stricter rate for creation, shared across web processes."""

import pickle
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import redis

from terminals.models import AuditEvent
from terminals.throttling import SLOTS, ApiKeyRateThrottle

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


@pytest.fixture(scope="module")
def throttled_split(django_db_setup):
    server = start_split(webs=2, workers=1, **RATES)
    yield server
    server.stop()


def test_split_web_processes_share_one_count(orm, throttled_split):
    """In split mode the count lives in Redis, so two web processes together allow the rate once."""
    _, key = make_key()
    first, second = (Api(url, key) for url in throttled_split.urls)
    statuses = [(first if number % 2 else second).get("/api/terminals").status_code for number in range(6)]
    assert statuses == [200] * 6
    assert first.get("/api/terminals").status_code == 429
    assert second.get("/api/terminals").status_code == 429


def test_requests_at_the_same_moment_through_both_web_processes_pass_no_more_than_the_rate(orm, throttled_split):
    """Eighteen requests at once, half through each web process, for a rate of six: each is counted in one atomic
    step, so exactly six pass. A throttle that reads the count and writes it back lets more through."""
    _, key = make_key()
    clients = [Api(url, key) for url in throttled_split.urls]
    start = threading.Barrier(18)

    def one(number):
        start.wait(timeout=30)
        return clients[number % 2].get("/api/terminals").status_code

    with ThreadPoolExecutor(18) as pool:
        statuses = list(pool.map(one, range(18)))
    assert sorted(statuses) == [200] * 6 + [429] * 12


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


# The throttle's count itself, in this process's cache, on a clock the test moves.


class Clocked(ApiKeyRateThrottle):
    now = 3_600_000.0  # on a slot's boundary for rates per hour (36 s slots, exact in binary)

    def timer(self):
        return self.now


def throttle_for_a_new_key(rate: str):
    """A throttle at `rate` for a key of its own, on the test's clock; returns it, a request and its cache key."""
    throttle = type("Throttle", (Clocked,), {"rate": rate})()
    request = SimpleNamespace(auth=SimpleNamespace(pk=uuid.uuid4().hex), user=None)
    return throttle, request, throttle.get_cache_key(request, None)


def test_a_key_with_a_high_rate_is_counted_in_a_bounded_record():
    """DRF's throttle keeps every request's time in the window: at this rate tens of thousands, read and written
    whole on each request. The count per slot stays at most SLOTS numbers, and still counts every request."""
    throttle, request, key = throttle_for_a_new_key("1000000/min")
    start = throttle.now
    for number in range(30_000):  # over a minute
        throttle.now = start + number * 0.002
        assert throttle.allow_request(request, None)
    record = throttle.cache.get(key)
    assert len(record) <= SLOTS and sum(record.values()) == 30_000
    assert len(pickle.dumps(record)) < 2000


def test_a_request_leaves_the_window_a_window_after_its_slot_and_refusals_count_nothing():
    throttle, request, key = throttle_for_a_new_key("3/hour")
    start = throttle.now
    for offset in (0, 720, 1440):
        throttle.now = start + offset
        assert throttle.allow_request(request, None)
    for offset in range(1800, 3600, 60):  # refused all along, each told to come back when the first has left
        throttle.now = start + offset
        assert not throttle.allow_request(request, None)
        assert throttle.wait() == 3600 - offset
    throttle.now = start + 3600
    assert throttle.allow_request(request, None)  # the refusals took no room
    assert not throttle.allow_request(request, None)
    assert throttle.wait() == 720  # the request at 720 s leaves at 4320 s
    assert sum(throttle.cache.get(key).values()) == 3


def test_a_slot_holds_its_requests_until_the_window_has_passed_its_start():
    """Requests are held to the start of their slot (36 s of an hour): one made late in its slot leaves the
    window up to a slot before a whole hour has passed, never after."""
    throttle, request, _ = throttle_for_a_new_key("1/hour")
    start = throttle.now
    throttle.now = start + 30  # late in the first slot
    assert throttle.allow_request(request, None)
    throttle.now = start + 3599
    assert not throttle.allow_request(request, None) and throttle.wait() == 1
    throttle.now = start + 3600
    assert throttle.allow_request(request, None)


def test_split_web_processes_keep_their_redis_connections(split_server, keys):
    """Each request counts against its key in Redis. Django makes a cache object per request context; had each
    made its own connection pool (as Django's Redis cache does), each request would connect to Redis anew."""
    server = redis.Redis.from_url(split_server.redis_url)
    before = server.info("stats")["total_connections_received"]
    api = Api(split_server.url, keys["alice"])
    for _ in range(60):
        assert api.get("/api/terminals").status_code == 200
    assert server.info("stats")["total_connections_received"] - before < 10
