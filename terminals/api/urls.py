"""The REST API's routes, under /api/: terminals, audit, health, and the OpenAPI schema with its docs."""

from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.routers import SimpleRouter

from .audit_views import AuditViewSet
from .health_views import HealthView, LivenessView, MetricsView, ReadinessView
from .views import TerminalViewSet


def on_first_request(make_view):
    """The view make_view(drf_spectacular.views) returns, made on the first request: drf-spectacular's views load its
    whole generator (and through terminals.api.schema, DEFAULT_GENERATOR_CLASS, the views' annotations), 5 MB of
    memory at start that most servers never use (bench figure 6). CSRF-exempt like the DRF view it calls."""
    made = []

    def first_use(request, *args, **kwargs):
        if not made:
            from drf_spectacular import views

            made.append(make_view(views))
        return made[0](request, *args, **kwargs)

    return csrf_exempt(first_use)


router = SimpleRouter(trailing_slash=False)
router.register("terminals", TerminalViewSet, basename="terminal")
router.register("audit", AuditViewSet, basename="audit")

urlpatterns = [
    path("health", HealthView.as_view(), name="health"),
    path("health/live", LivenessView.as_view(), name="health-live"),
    path("health/ready", ReadinessView.as_view(), name="health-ready"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("schema/", on_first_request(lambda views: views.SpectacularAPIView.as_view()), name="schema"),
    path("docs/", on_first_request(lambda views: views.SpectacularSwaggerView.as_view(url_name="schema")), name="docs"),
    path("", include(router.urls)),
]
