"""What every dashboard page sends: login required, a strict Content-Security-Policy, no framing, no caching.

Scripts come only from our own static files (no inline script, no eval); styles from our own files, plus the inline
styles xterm.js sets on its elements. WebSockets go back to the same host only.
"""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required

POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",  # xterm.js styles its rows and cursor inline
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self' ws: wss:",  # 'self' does not cover ws: in every browser; the socket checks Origin itself
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
])

# The recording player (asciinema-player 3.x, vendored) runs its terminal emulator as WebAssembly, inlined in its
# bundle and compiled with WebAssembly.instantiate(): Chromium blocks that under script-src 'self' alone. Its
# 'wasm-unsafe-eval' allows compiling WebAssembly only, not eval() or new Function(). Nothing else is needed: the
# player fetches the .cast file from our own host (connect-src 'self') and styles itself inline (style-src above).
PLAYER_POLICY = POLICY.replace("script-src 'self'", "script-src 'self' 'wasm-unsafe-eval'", 1)
assert PLAYER_POLICY != POLICY, "script-src in POLICY changed: PLAYER_POLICY must be rebuilt"


def with_policy(response):
    response["Content-Security-Policy"] = POLICY
    response["X-Frame-Options"] = "DENY"
    response["Referrer-Policy"] = "same-origin"
    response["Cache-Control"] = "no-store"
    return response


def with_headers(view):
    """The view, its answers carrying the policy above. Its name and docstring are kept, not its attributes: a
    class-based view's view_class stays its own, so the API's route checks do not take a login page for an API
    view."""
    @wraps(view, updated=())
    def secured(request, *args, **kwargs):
        return with_policy(view(request, *args, **kwargs))
    return secured


def page(view):
    """A dashboard page: for logged-in users only (others go to the login page), with the policy above."""
    return login_required(with_headers(view))


def player_page(view):
    """A dashboard page that plays recordings (player.js): as page(), but with PLAYER_POLICY."""
    @wraps(view, updated=())
    def secured(request, *args, **kwargs):
        response = with_policy(view(request, *args, **kwargs))
        response["Content-Security-Policy"] = PLAYER_POLICY
        return response
    return login_required(secured)
