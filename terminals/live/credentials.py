"""Live connections end soon after their credentials stop being usable: one check a round for all of a process's.

Each connection used to ask the database about its own key every round: a thousand viewers made 500 queries a
second, taken from every request of the process. Now one task per process asks once a round about every key and
user its connections hold, so a revoked key's connections still close within a round (plus the query), however
many there are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from django.contrib.auth import get_user_model
from django.db import DatabaseError

from .. import database_threads
from ..models import ApiKey

logger = logging.getLogger(__name__)

Credential = tuple[str, int]  # ("key", its pk) or ("user", its pk) for a connection without a key (a cookie)
CHUNK = 500  # ids per query, well below SQLite's limit on a statement's variables


class CredentialWatch:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._watched: dict[object, tuple[Credential, Callable[[], Awaitable[None]]]] = {}
        self._task: asyncio.Task | None = None

    def watch(self, connection: object, credential: Credential, on_unusable: Callable[[], Awaitable[None]]) -> None:
        """From now on, on_unusable() runs once when the credential is found unusable (on the event loop)."""
        self._watched[connection] = (credential, on_unusable)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run())

    def unwatch(self, connection: object) -> None:
        self._watched.pop(connection, None)

    async def _run(self) -> None:
        while self._watched:
            await asyncio.sleep(self.seconds)
            watched = dict(self._watched)
            try:
                unusable = await database_threads.run(_unusable, {credential for credential, _ in watched.values()})
            except DatabaseError as error:  # locked or away for a moment: the next round checks again
                logger.warning("checking the credentials of live connections failed: %s", error)
                continue
            except Exception:  # noqa: BLE001 - the watch must outlive any one round, or no connection is checked
                logger.exception("checking the credentials of live connections failed")
                continue
            for connection, (credential, on_unusable) in watched.items():
                if credential in unusable and self._watched.pop(connection, None) is not None:
                    try:
                        await on_unusable()
                    except Exception:  # one connection's close must not spare the others
                        logger.exception("closing a live connection whose credentials ended failed")


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
