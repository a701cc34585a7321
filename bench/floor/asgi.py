"""daphne bench.floor.asgi:application (DJANGO_SETTINGS_MODULE=bench.floor.settings)."""

import django
from django.core.asgi import get_asgi_application

django.setup()
application = get_asgi_application()
