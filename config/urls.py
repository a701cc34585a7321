"""URLs: the REST API under /api/, its schema and docs, and the admin."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from terminals.api import errors as errors_http
from terminals.api.views import AuditViewSet, HealthView, LivenessView, ReadinessView, TerminalViewSet
from terminals.acp.views import AcpView

router = SimpleRouter(trailing_slash=False)
router.register("terminals", TerminalViewSet, basename="terminal")
router.register("audit", AuditViewSet, basename="audit")

urlpatterns = [
    # Until there is a page of our own, the start is the API's documentation (the admin's "View site" leads here).
    path("", RedirectView.as_view(url="/api/docs/", permanent=False), name="home"),
    path("api/health", HealthView.as_view(), name="health"),
    path("api/health/live", LivenessView.as_view(), name="health-live"),
    path("api/health/ready", ReadinessView.as_view(), name="health-ready"),
    path("api/acp", AcpView.as_view(), name="acp"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("api/", include(router.urls)),
    path("admin/", admin.site.urls),
]

handler400 = errors_http.bad_request
handler403 = errors_http.forbidden
handler404 = errors_http.not_found
handler500 = errors_http.server_error
