"""The dashboard's routes, at the root of the site (the admin stays at /admin/, the API at /api/)."""

from django.contrib.auth import views as auth_views
from django.urls import path

from . import audit_views, key_views, recording_views, views
from .security import with_headers

app_name = "dashboard"


urlpatterns = [
    path("", views.terminal_list, name="terminals"),
    path("login/", with_headers(auth_views.LoginView.as_view(template_name="dashboard/login.html",
                                                          redirect_authenticated_user=True)), name="login"),
    path("logout/", with_headers(auth_views.LogoutView.as_view(next_page="dashboard:login")), name="logout"),
    path("terminals/new", views.terminal_create, name="terminal_create"),
    path("terminals/<uuid:terminal_id>/", views.terminal_page, name="terminal"),
    path("terminals/<uuid:terminal_id>/end", views.terminal_end, name="terminal_end"),
    path("terminals/<uuid:terminal_id>/share", views.terminal_share, name="terminal_share"),
    path("terminals/<uuid:terminal_id>/commands", views.terminal_commands, name="terminal_commands"),
    path("terminals/<uuid:terminal_id>/watchers", views.terminal_watchers, name="terminal_watchers"),
    path("terminals/<uuid:terminal_id>/output.txt", views.terminal_download, name="terminal_download"),
    path("recordings/", recording_views.recording_list, name="recordings"),
    path("recordings/<uuid:terminal_id>/", recording_views.recording_page, name="recording"),
    path("recordings/<uuid:terminal_id>.cast", recording_views.recording_file, name="recording_file"),
    path("audit/", audit_views.audit_list, name="audit"),
    path("audit/verify", audit_views.audit_verify, name="audit_verify"),
    path("keys/", key_views.key_list, name="keys"),
    path("keys/new", key_views.key_create, name="key_create"),
    path("keys/<str:prefix>/revoke", key_views.key_revoke, name="key_revoke"),
    path("users/new", key_views.user_create, name="user_create"),
    # path, not str: a user name may hold a "/" (made in the admin or by create_user), and reversing a str route
    # for it raised NoReverseMatch on the keys page, locking staff out of key and user management.
    path("users/<path:username>/change", key_views.user_change, name="user_change"),
    path("workers/", views.worker_list, name="workers"),
]
