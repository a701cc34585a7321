"""docs/settings.md is the one table of settings: every variable the settings read is in it, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Read, but not settings: the process's own time zone, kept for the terminals' environment.
NOT_SETTINGS = {"TZ"}
READERS = r"(?:os\.getenv|os\.environ\.get|env_int|env_bool|env_list|env_secret|env_choice)"


def read_by_settings() -> set[str]:
    source = (ROOT / "config" / "settings.py").read_text() + (ROOT / "config" / "env.py").read_text()
    names = set(re.findall(rf'{READERS}\(\s*"([A-Z][A-Z0-9_]+)"', source))
    for aliases in re.findall(r"aliases=\(([^)]*)\)", source):
        names |= set(re.findall(r'"([A-Z][A-Z0-9_]+)"', aliases))
    return names - NOT_SETTINGS


def documented() -> set[str]:
    table = (ROOT / "docs" / "settings.md").read_text()
    names = set()
    for row in re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", table, re.M):
        names.add(row)
    # A row may name the REST contract's older spelling beside the new one.
    names |= set(re.findall(r"`(MAX_BUFFER_SIZE|SESSION_TIMEOUT)`", table))
    return names


def test_every_setting_is_in_the_table_and_the_table_names_only_settings():
    read, table = read_by_settings(), documented()
    assert read, "no setting found: the pattern above no longer matches config/settings.py"
    assert sorted(read - table) == [], "read by config/settings.py but missing from docs/settings.md"
    assert sorted(table - read) == [], "in docs/settings.md but read by nothing"
