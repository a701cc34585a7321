"""Every link between the project's documents leads somewhere: the file exists, and so does the heading an
#anchor names (GitHub's rule for heading anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "SECURITY.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "bench").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (fenced code is not looked at)."""
    found, seen, fence = set(), {}, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"^#{1,6} (.*)$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def local_links(path: Path):
    fence = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in LINK.findall(line):
            if not re.match(r"^[a-z]+:", target):
                yield target


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_local_link_resolves(document):
    broken = []
    for target in local_links(document):
        file_part, _, anchor = target.partition("#")
        destination = (document.parent / file_part).resolve() if file_part else document
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{document.relative_to(ROOT)}: {broken}"


def test_the_readme_maps_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    missing = [page.name for page in (ROOT / "docs").glob("*.md") if f"docs/{page.name}" not in readme]
    assert not missing, f"pages the README's map does not name: {missing}"
