"""The REST API's routes, under /api/: terminals, audit, health, and the OpenAPI schema with its docs."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from . import schema  # noqa: F401 - registers the OpenAPI extensions (API-key authentication)
from .views import AuditViewSet, HealthView, LivenessView, MetricsView, ReadinessView, TerminalViewSet

router = SimpleRouter(trailing_slash=False)
router.register("terminals", TerminalViewSet, basename="terminal")
router.register("audit", AuditViewSet, basename="audit")

urlpatterns = [
    path("health", HealthView.as_view(), name="health"),
    path("health/live", LivenessView.as_view(), name="health-live"),
    path("health/ready", ReadinessView.as_view(), name="health-ready"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("", include(router.urls)),
]
