"""Live connections end soon after their credentials stop being usable: one check a round for all of a process's.

Each connection used to ask the database about its own key every round: a thousand viewers made 500 queries a
second, taken from every request of the process. Now one task per process asks once a round about every key and
user its connections hold, so a revoked key's connections still close within a round (plus the query), however
many there are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.contrib.auth import get_user_model

from ..models import ApiKey
from ..rounds import RoundWatch

Credential = tuple[str, int]  # ("key", its pk) or ("user", its pk) for a connection without a key (a cookie)
CHUNK = 500  # ids per query, well below SQLite's limit on a statement's variables


class CredentialWatch:
    """The live connections of this process by the credential each holds, checked in one round (rounds.py)."""

    def __init__(self, seconds: float) -> None:
        # _unusable looked up at each round, not bound here.
        self._rounds = RoundWatch(seconds, lambda wanted: dict.fromkeys(_unusable(set(wanted)), True),
                                  "the credentials of live connections")
        self._held: dict[object, Credential] = {}

    def watch(self, connection: object, credential: Credential, on_unusable: Callable[[], Awaitable[None]]) -> None:
        """From now on, on_unusable() runs once when the credential is found unusable (on the event loop)."""
        self._held[connection] = credential
        self._rounds.watch(credential, connection, lambda _: self._end(connection, on_unusable))

    def unwatch(self, connection: object) -> None:
        credential = self._held.pop(connection, None)
        if credential is not None:
            self._rounds.unwatch(credential, connection)

    async def _end(self, connection: object, on_unusable: Callable[[], Awaitable[None]]) -> None:
        self._held.pop(connection, None)
        await on_unusable()


def _unusable(credentials: set[Credential]) -> set[Credential]:
    keys = sorted(pk for kind, pk in credentials if kind == "key")
    users = sorted(pk for kind, pk in credentials if kind == "user")
    usable_keys, active_users = set(), set()
    for start in range(0, len(keys), CHUNK):
        found = ApiKey.objects.select_related("user").filter(pk__in=keys[start:start + CHUNK])
        usable_keys.update(record.pk for record in found if record.is_usable() and record.user.is_active)
    for start in range(0, len(users), CHUNK):
        active = get_user_model().objects.filter(pk__in=users[start:start + CHUNK], is_active=True)
        active_users.update(active.values_list("pk", flat=True))
    return {credential for credential in credentials
            if credential[1] not in (usable_keys if credential[0] == "key" else active_users)}
