"""URLs: each interface brings its own routes (terminals/<interface>/urls.py); the admin is Django's."""

from django.contrib import admin
from django.urls import include, path

from terminals.api import errors as api_errors
from terminals.dashboard import views as dashboard_views

urlpatterns = [
    path("api/", include("terminals.acp.urls")),
    path("api/", include("terminals.api.urls")),
    path("admin/", admin.site.urls),
    path("", include("terminals.dashboard.urls")),  # the dashboard (the admin's "View site" leads here)
]

# Errors outside any view (a bad Host, ...) answer in the API's error envelope; a 404 by where it was asked (below).
handler400 = "terminals.api.errors.bad_request"
handler403 = "terminals.api.errors.forbidden"


def not_found(request, exception=None):
    """A path nothing serves, or a view's 404: the API's JSON envelope for API paths (clients read its code), the
    dashboard's HTML page for the rest (a browser shows it)."""
    if request.path == "/api" or request.path.startswith("/api/"):
        return api_errors.not_found(request, exception)
    return dashboard_views.not_found(request, exception)


def server_error(request):
    """An exception no view turned into an answer (a middleware's database lookup, say): the database out of reach
    is 503 DATABASE_UNAVAILABLE, as the API's envelope or the dashboard's page by where it was asked; anything else
    the API's 500 envelope."""
    import sys

    from terminals.exceptions import database_unavailable

    unavailable = database_unavailable(sys.exc_info()[1]) if sys.exc_info()[1] is not None else None
    if unavailable is None:
        return api_errors.server_error(request)
    if request.path == "/api" or request.path.startswith("/api/"):
        return api_errors.database_unavailable(request, unavailable)
    return dashboard_views.database_unavailable(request, unavailable)


handler404 = not_found
handler500 = server_error
