"""The REST API: DRF views, serializers, the OpenAPI schema, and Server-Sent Events."""
