"""The service's settings with the floor's URLs, nothing else changed (same apps, middleware, database, DRF)."""

from config.settings import *  # noqa: F403 - the same stack, on purpose

ROOT_URLCONF = "bench.floor.urls"
