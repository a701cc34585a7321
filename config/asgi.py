"""ASGI entry point: HTTP goes to Django (with the embedded terminal worker unless in split mode)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - Django must be set up first

from terminals.embedded import WithEmbeddedWorker  # noqa: E402

application = WithEmbeddedWorker(ProtocolTypeRouter({"http": django_application}))
