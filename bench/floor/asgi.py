"""daphne bench.floor.asgi:application (DJANGO_SETTINGS_MODULE=bench.floor.settings): the service's own Django
handler (terminals/request_threads.py, threads reused as in config/asgi.py), without the service's other routes."""

import django

django.setup(set_prefix=False)

from terminals.request_threads import ReusedThreadsASGIHandler  # noqa: E402 - Django must be set up first

application = ReusedThreadsASGIHandler()
