"""The cache the throttles count in: Django's local-memory cache (embedded) or Redis cache (split), with an atomic
count per slot of time, and in Redis one connection pool per process instead of one per request.

Django keeps cache objects in a context-local store, and each ASGI request runs in a context of its own, so every
request built a new RedisCache, a new connection pool and a new connection to Redis (its handshake included) for
the throttle's commands; the old ones waited for the garbage collector to close them. Measured with 50 clients
polling split mode's web process, connecting took a seventh of its busy time. Here every cache object made from the
same settings in a process shares one client, and with it one pool of connections (redis-py's pool is thread-safe
and starts afresh in a forked child).

count_in_slot() is what the throttles need (terminals/throttling.py): add to one slot's count, drop the slots that
have left the window, and read what is left, as one atomic step: in Redis one script, a single round trip, so
requests at the same moment through any web process are each counted once.
"""

from __future__ import annotations

import threading

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

# KEYS[1] a key's slots (a hash of slot -> count); ARGV: the slot, the oldest slot kept, what to add, expiry (s).
COUNT_IN_SLOT = """
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
    if tonumber(fields[i]) < tonumber(ARGV[2]) then
        redis.call('HDEL', KEYS[1], fields[i])
    end
end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return redis.call('HGETALL', KEYS[1])
"""

_clients: dict[str, SharedClient] = {}
_lock = threading.Lock()
_local_counts = threading.Lock()


class SharedRedisCache(RedisCache):
    @property
    def _cache(self) -> SharedClient:
        settings_key = repr((self._servers, sorted(self._options.items())))
        client = _clients.get(settings_key)
        if client is None:
            with _lock:
                client = _clients.setdefault(settings_key, SharedClient(self._servers, **self._options))
        return client

    def count_in_slot(self, key: str, slot: int, oldest: int, timeout: int, add: int = 1) -> dict[int, int]:
        """Adds `add` to the key's count in `slot`, drops slots before `oldest`, returns the counts left."""
        key = self.make_and_validate_key(key)
        fields = self._cache.script()(keys=[key], args=[slot, oldest, add, max(1, int(timeout))])
        return {int(fields[i]): int(fields[i + 1]) for i in range(0, len(fields), 2)}


class SharedClient(RedisCacheClient):
    """One redis.Redis and one registered script per pool: redis-py makes a whole client object per command
    otherwise."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._for_pool: dict[int, tuple] = {}  # id(pool) -> (client, script); pools live as long as this object

    def get_client(self, key=None, *, write=False):
        return self._client_and_script(write)[0]

    def script(self, write: bool = True):
        return self._client_and_script(write)[1]

    def _client_and_script(self, write: bool) -> tuple:
        pool = self._get_connection_pool(write)
        made = self._for_pool.get(id(pool))
        if made is None:
            client = self._client(connection_pool=pool)
            made = self._for_pool.setdefault(id(pool), (client, client.register_script(COUNT_IN_SLOT)))
        return made


class LocalCache(LocMemCache):
    """The embedded server's cache: one process, so a lock makes the count atomic."""

    def count_in_slot(self, key: str, slot: int, oldest: int, timeout: int, add: int = 1) -> dict[int, int]:
        with _local_counts:
            counts = {held: count for held, count in self.get(key, {}).items() if held >= oldest}
            counts[slot] = counts.get(slot, 0) + add
            self.set(key, counts, timeout)
            return counts

    async def aadd(self, key, value, timeout=DEFAULT_TIMEOUT, version=None) -> bool:
        # Memory only, under a lock held for microseconds: run on the event loop. Django's aadd hops to a thread
        # and back, which cost more than the add (0.28 ms of a worker's create, bench/ANALYSIS.md).
        return self.add(key, value, timeout, version)
