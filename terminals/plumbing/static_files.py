"""Static files (the admin's styles, the API docs' Swagger UI) served by the service itself, in every mode.

ServeStatic answers them straight from the folders Django's finders know (each installed app's `static/`), so a
fresh checkout needs no collectstatic step and no other web server. Every other request pays one dictionary
lookup of its path.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.staticfiles.finders import get_finders
from servestatic import ServeStaticASGI


def with_static_files(application):
    """application, with GET and HEAD of STATIC_URL paths answered from the apps' static folders."""
    served = ServeStaticASGI(application, max_age=3600)
    prefix = "/" + settings.STATIC_URL.strip("/") + "/"
    # Later finders' files do not replace earlier ones', as with Django's own lookup.
    for finder in reversed(list(get_finders())):
        for storage in getattr(finder, "storages", {}).values():
            served.add_files(storage.location, prefix=prefix)
    return served
