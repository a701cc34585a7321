"""Every mutant of the mutation check (scripts/mutants.py) still applies: its text occurs exactly once in its file.
A refactor that moves the code a mutant breaks would otherwise leave a promise whose mutant silently does nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from mutants import MUTANTS  # noqa: E402


@pytest.mark.parametrize("mutant", MUTANTS, ids=[mutant.name for mutant in MUTANTS])
def test_every_mutant_finds_its_text_exactly_once(mutant):
    source = (ROOT / mutant.path).read_text()
    assert source.count(mutant.find) == 1, f"{mutant.name}: its text occurs {source.count(mutant.find)} times in " \
                                           f"{mutant.path}; point it at the code it breaks now"

