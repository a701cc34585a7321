"""URLs: each interface brings its own routes (terminals/<interface>/urls.py); the admin is Django's."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("api/", include("terminals.acp.urls")),
    path("api/", include("terminals.api.urls")),
    path("admin/", admin.site.urls),
    path("", include("terminals.dashboard.urls")),  # the dashboard (the admin's "View site" leads here)
]

# Errors outside any view (unknown paths, a bad Host) answer in the API's error envelope.
handler400 = "terminals.api.errors.bad_request"
handler403 = "terminals.api.errors.forbidden"
handler404 = "terminals.api.errors.not_found"
handler500 = "terminals.api.errors.server_error"
