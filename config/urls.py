"""URLs: each interface brings its own routes (terminals/<interface>/urls.py); the admin is Django's."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    # Until there is a page of our own, the start is the API's documentation (the admin's "View site" leads here).
    path("", RedirectView.as_view(url="/api/docs/", permanent=False), name="home"),
    path("api/", include("terminals.acp.urls")),
    path("api/", include("terminals.api.urls")),
    path("admin/", admin.site.urls),
]

# Errors outside any view (unknown paths, a bad Host) answer in the API's error envelope.
handler400 = "terminals.api.errors.bad_request"
handler403 = "terminals.api.errors.forbidden"
handler404 = "terminals.api.errors.not_found"
handler500 = "terminals.api.errors.server_error"
