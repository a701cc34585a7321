"""Django's own error pages (unknown URL, server error, ...) in the API's error envelope."""

from django.http import JsonResponse

from .exceptions import envelope


def bad_request(request, exception=None):
    return JsonResponse(envelope("INVALID_INPUT", "Bad request"), status=400)


def forbidden(request, exception=None):
    return JsonResponse(envelope("FORBIDDEN", "Not allowed"), status=403)


def not_found(request, exception=None):
    return JsonResponse(envelope("NOT_FOUND", f"No endpoint at {request.path}"), status=404)


def server_error(request):
    return JsonResponse(envelope("INTERNAL_ERROR", "Internal error"), status=500)
