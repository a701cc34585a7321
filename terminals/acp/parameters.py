"""The ACP methods' parameters, read and checked: each reader returns the value, or raises Invalid params (-32602)
naming the parameter and what it must be."""

from __future__ import annotations

from ..models import LARGEST_OUTPUT_BYTE_LIMIT
from .rpc import INVALID_PARAMS, RpcError

MAX_SESSION_ID = 200


def invalid(field: str, message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, {"field": field, "message": message})


def string(params: dict, name: str, *, required: bool = True, max_length: int | None = None) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise invalid(name, "is required")
        return None
    if not isinstance(value, str) or (required and not value):
        raise invalid(name, "must be a non-empty string" if required else "must be a string")
    if max_length is not None and len(value) > max_length:
        raise invalid(name, f"must be at most {max_length} characters")
    _refuse_nul(name, value)
    return value


def _refuse_nul(name: str, *texts: str) -> None:
    # A command line, an environment and a path end at NUL, and PostgreSQL text cannot hold it.
    if any("\x00" in text for text in texts):
        raise invalid(name, "must not contain NUL (\\u0000)")


def strings(params: dict, name: str) -> list[str]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise invalid(name, "must be a list of strings")
    _refuse_nul(name, *value)
    return value


def env(params: dict) -> dict[str, str]:
    value = params.get("env")
    if value is None:
        return {}
    if not isinstance(value, list):
        raise invalid("env", "must be a list of {name, value}")
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "value"}:
            raise invalid("env", "each item must be exactly {name, value}")
        if not isinstance(item["name"], str) or not isinstance(item["value"], str):
            raise invalid("env", "name and value must be strings")
        _refuse_nul("env", item["name"], item["value"])
    # A name given twice keeps its last value, as a shell's assignments would.
    return {item["name"]: item["value"] for item in value}


def cwd(params: dict) -> str | None:
    cwd = string(params, "cwd", required=False)
    if cwd is not None and not cwd.startswith("/"):
        raise invalid("cwd", "must be an absolute path")
    return cwd


def output_byte_limit(params: dict) -> int | None:
    value = params.get("outputByteLimit")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= LARGEST_OUTPUT_BYTE_LIMIT:
        raise invalid("outputByteLimit", f"must be an integer from 1 to {LARGEST_OUTPUT_BYTE_LIMIT}")
    return value


def record(params: dict) -> bool:
    """`_meta: {"record": true}` asks for the terminal to be recorded (ACP leaves _meta to implementations)."""
    meta = params.get("_meta")
    if meta is None:
        return False
    if not isinstance(meta, dict):
        raise invalid("_meta", "must be an object")
    value = meta.get("record", False)
    if not isinstance(value, bool):
        raise invalid("_meta.record", "must be true or false")
    return value


def session_id(params: dict) -> str:
    return string(params, "sessionId", max_length=MAX_SESSION_ID)

