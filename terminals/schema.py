"""OpenAPI extensions: how drf-spectacular documents the API-key scheme and the env field."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerFieldExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "terminals.auth.ApiKeyAuthentication"
    name = ["ApiKeyHeader", "ApiKeyAuthorization"]

    def get_security_requirement(self, auto_schema):
        # Either header is enough: two requirements (alternatives), not one that needs both headers.
        return [{name: []} for name in self.name]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Authorization: Api-Key <key>"},
        ]


class EnvFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "terminals.serializers.EnvField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "oneOf": [
                {"type": "object", "additionalProperties": {"type": "string"}},
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                        "required": ["name", "value"],
                    },
                },
            ],
            "description": "Environment variables: an object, or a list of {name, value}",
        }
