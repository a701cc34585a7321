"""Which browser origins may act with a user's login: the one rule for every check of an Origin header that guards a
cookie (the live WebSocket here; the dashboard's forms get the same rule from Django's CSRF middleware).

An origin is a scheme, a host and a port, all three. A page served from another port of the same host, over the other
scheme, or from a sibling host is another origin: browsers send the session cookie (SameSite=Lax) from such
same-site pages, so comparing host names alone let any of them act as the logged-in user. Allowed are the
service's own origin (the scheme the request came in on and its Host header, which must name a host in
ALLOWED_HOSTS) and the origins in CSRF_TRUSTED_ORIGINS (the list Django's CSRF check reads too), for a service
reached through a proxy that terminates TLS or under another name.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

# The scheme of the page that opened a connection, from the scheme the connection came in on.
PAGE_SCHEMES = {"ws": "http", "wss": "https", "http": "http", "https": "https"}


def origin_allowed(origin: str | None, *, scheme: str, host: str) -> bool:
    """Whether a request that came in on scheme with this Host header, from a page of this Origin, may use a cookie.
    A missing Origin, or "null" (sandboxed frames, file: pages, some redirects), is never allowed."""
    if not origin or origin == "null":
        return False
    origin = origin.strip().lower()
    if origin in _trusted_exactly() or any(_matches(origin, pattern) for pattern in _trusted_patterns()):
        return True
    return origin == own_origin(scheme=scheme, host=host)


def own_origin(*, scheme: str, host: str) -> str | None:
    """The origin of the service as this request reached it, or None when its Host is not in ALLOWED_HOSTS."""
    page_scheme = PAGE_SCHEMES.get((scheme or "").lower())
    domain, _ = split_domain_port(host or "")
    if page_scheme is None or not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    return f"{page_scheme}://{host.lower()}"


def _trusted_exactly() -> set[str]:
    return {entry.lower() for entry in settings.CSRF_TRUSTED_ORIGINS if "*" not in entry}


def _trusted_patterns() -> list[str]:
    # Django's form: "https://*.example.com" trusts every subdomain of example.com, over https only.
    return [entry.lower() for entry in settings.CSRF_TRUSTED_ORIGINS if "*" in entry]


def _matches(origin: str, pattern: str) -> bool:
    parts, wanted = urlsplit(origin), urlsplit(pattern)
    suffix = wanted.netloc.lstrip("*")  # ".example.com", which is_same_domain reads as "any subdomain of"
    return parts.scheme == wanted.scheme and bool(parts.netloc) and is_same_domain(parts.netloc, suffix)
