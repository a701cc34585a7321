"""The floor's authentication: the service's API key, found with one indexed query (its prefix, then its hash
compared), with none of the service's caching or bookkeeping."""

import hmac

from rest_framework import authentication, exceptions

from terminals.models import ApiKey, hash_key, key_prefix


def key_record(key: str) -> ApiKey | None:
    prefix = key_prefix(key)
    record = ApiKey.objects.filter(prefix=prefix).select_related("user").first() if prefix else None
    if record is None or not hmac.compare_digest(record.hashed_key, hash_key(key)):
        return None
    return record


class OneQueryKey(authentication.BaseAuthentication):
    def authenticate(self, request):
        record = key_record(request.META.get("HTTP_X_API_KEY", ""))
        if record is None:
            raise exceptions.AuthenticationFailed("Unknown API key")
        return record.user, record
