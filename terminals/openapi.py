"""drf-spectacular's @extend_schema, applied when the OpenAPI document is first built instead of at import.

drf-spectacular's decorator builds its schema class at once, from DEFAULT_SCHEMA_CLASS (terminals.api.schema), and so
imports its whole generator (drf_spectacular.openapi, which imports rest_framework.test, django.test and unittest):
about 5 MB of every server's memory at start (bench figure 6) for a document most servers never build. This
decorator notes its arguments; terminals.api.schema, imported before any document is built (it holds the generator
class, SPECTACULAR_SETTINGS), applies them in the order they were noted, which is the order Python ran the
decorators in, so the document is the same. Once applied, a decorator applies at once.
"""

from __future__ import annotations

_deferred: list[tuple[object, dict]] = []
_applied = False


def extend_schema(**options):
    """drf_spectacular.utils.extend_schema(**options), deferred until the schema machinery is loaded."""

    def decorator(target):
        if _applied:
            return _extend(target, options)
        if isinstance(target, type):
            # No schema until applied. DRF's DefaultSchema, the one inherited, would load DEFAULT_SCHEMA_CLASS as soon
            # as anything reads it, and DRF's router reads every attribute of a viewset. Applied, the decorator
            # finds None, takes DEFAULT_SCHEMA_CLASS as it does for the inherited one, and sets the class's schema.
            target.schema = None
        _deferred.append((target, options))
        return target

    return decorator


def apply_deferred() -> None:
    """Applies every decorator noted so far, in order, and those to come at once."""
    global _applied
    _applied = True
    while _deferred:
        target, options = _deferred.pop(0)
        _extend(target, options)


def _extend(target, options):
    from drf_spectacular.utils import extend_schema as spectacular_extend_schema

    decorated = spectacular_extend_schema(**options)(target)
    assert decorated is target  # it annotates the function or class in place, which the deferral relies on
    return decorated
