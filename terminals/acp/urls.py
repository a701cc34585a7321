"""The ACP endpoint's route: one JSON-RPC URL, /api/acp."""

from django.urls import path

from .views import AcpView

urlpatterns = [path("acp", AcpView.as_view(), name="acp")]
