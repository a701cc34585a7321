"""Reading settings from the environment; a bad value fails loudly at start."""

from __future__ import annotations

import os
import sys

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def env_bool(name: str, default: bool) -> bool:
    value = os.getenv(name)
    if value is None:
        return default
    if value.strip().lower() in TRUE:
        return True
    if value.strip().lower() in FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.getenv(name, default).strip().lower() or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def _named(name: str, aliases: tuple[str, ...]) -> tuple[str, str | None]:
    """The variable that sets a setting, and its value: name first, then the older names it replaced, which
    keep working. When both are set, name wins and the start says so."""
    value = os.getenv(name)
    for alias in aliases:
        old = os.getenv(alias)
        if old is None or old.strip() == "":
            continue
        if value is None or value.strip() == "":
            return alias, old
        if old.strip() != value.strip():
            print(f"WARNING: {alias}={old} is ignored: {name}={value} replaces it", file=sys.stderr)
    return name, value


def env_int(name: str, default: int, *, minimum: int = 0, aliases: tuple[str, ...] = ()) -> int:
    name, value = _named(name, aliases)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.getenv(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_secret(name: str, default: str | None = None) -> str | None:
    """Reads NAME, or the file named by NAME_FILE (for secrets mounted as files)."""
    path = os.getenv(f"{name}_FILE")
    if path:
        try:
            with open(path) as secret:
                return secret.read().strip()
        except OSError as error:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {path}: {error.strerror}") from None
    return os.getenv(name, default)
