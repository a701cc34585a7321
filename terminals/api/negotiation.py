"""How the API picks its answer's format: what the client's Accept header asks for when a view can give it, else the
view's first format (JSON, the envelope's), never a refusal.

DRF's own negotiation raises NotAcceptable for an Accept header that names none of a view's formats (text/html,
text/plain, application/xml: what browsers, curl wrappers and HTTP libraries send by default), and that error, with
no renderer chosen yet, became a 500 with a traceback on every endpoint, /api/health included. The API speaks JSON:
a client that asked for something else still gets the JSON answer, marked application/json.
"""

from __future__ import annotations

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation


class JsonWhateverAccept(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type
