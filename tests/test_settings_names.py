"""Settings have one TERMINALS_* name each; the REST contract's older names keep working, and when both are given
the new one wins, with a warning at start."""

from __future__ import annotations

import pytest

from config.env import env_int


@pytest.mark.parametrize(("environment", "expected"), [
    ({}, 7),
    ({"MAX_BUFFER_SIZE": "11"}, 11),
    ({"TERMINALS_MAX_BUFFER_LINES": "12"}, 12),
    ({"TERMINALS_MAX_BUFFER_LINES": "12", "MAX_BUFFER_SIZE": "11"}, 12),
])
def test_a_setting_reads_its_name_then_its_alias(monkeypatch, capsys, environment, expected):
    for name in ("MAX_BUFFER_SIZE", "TERMINALS_MAX_BUFFER_LINES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert env_int("TERMINALS_MAX_BUFFER_LINES", 7, aliases=("MAX_BUFFER_SIZE",)) == expected
    warned = capsys.readouterr().err
    assert ("MAX_BUFFER_SIZE=11 is ignored" in warned) == (len(environment) == 2)


def test_a_bad_alias_value_names_the_alias(monkeypatch):
    monkeypatch.delenv("TERMINALS_MAX_BUFFER_LINES", raising=False)
    monkeypatch.setenv("MAX_BUFFER_SIZE", "many")
    with pytest.raises(Exception, match="MAX_BUFFER_SIZE must be a whole number"):
        env_int("TERMINALS_MAX_BUFFER_LINES", 7, aliases=("MAX_BUFFER_SIZE",))
