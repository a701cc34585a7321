"""Every test a promise names exists: a renamed or deleted test cannot leave a promise in SECURITY.md or the docs
pointing at nothing. (Whether each named test fails when its promise breaks is what scripts/mutation_check.py shows.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "SECURITY.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
NAMED_TEST = re.compile(r"`(?:tests/(test_\w+\.py)::)?(test_\w+)(?:\[[^\]`]*\])?`")
NAMED_FILE = re.compile(r"`(tests/test_\w+\.py)`")


def defined_tests() -> dict[str, set[str]]:
    """Test function names by file name, from the source (parametrised ids aside)."""
    found = {}
    for path in (ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        found[path.name] = {node.name for node in ast.walk(tree)
                            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}
    return found


@pytest.mark.parametrize("document", [path for path in DOCUMENTS if path.exists()], ids=lambda path: path.name)
def test_every_test_a_document_names_exists(document):
    tests = defined_tests()
    everywhere = set().union(*tests.values())
    text = document.read_text()
    missing = []
    for file_name, name in NAMED_TEST.findall(text):
        if file_name and name not in tests.get(file_name, set()):
            missing.append(f"tests/{file_name}::{name}")
        elif not file_name and name not in everywhere:
            missing.append(name)
    missing += [path for path in NAMED_FILE.findall(text) if not (ROOT / path).exists()]
    assert not missing, f"{document.name} names tests that do not exist: {missing}"


def test_the_check_finds_the_names_security_md_gives():
    """The pattern really matches how SECURITY.md names tests (a check that matched nothing would pass)."""
    assert len(NAMED_TEST.findall((ROOT / "SECURITY.md").read_text())) > 50
