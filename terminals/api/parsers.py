"""The REST API's body parser: JSON that the service can keep, or a 400 that says what is wrong with it."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from .. import json_input


class KeepableJSONParser(JSONParser):
    """DRF's JSON parser, refusing what json_input refuses: non-finite numbers, integers wider than 64 bits,
    lone surrogates and nesting deeper than json_input.MAX_DEPTH."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            return json_input.loads(stream.read().decode(encoding))
        except UnicodeDecodeError as error:
            raise ParseError(f"the body is not {encoding} text ({error.reason})") from None
        except json_input.UnkeepableJson as problem:
            raise ParseError(str(problem)) from None
