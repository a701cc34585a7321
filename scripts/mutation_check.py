"""Proves that the tests catch the regressions that would hurt most: each mutant plants one, and must be killed.

Every mutant below breaks one promise of SECURITY.md or the README in a copy of the checkout (the working tree as
it is, uncommitted changes included), then runs the tests that should catch it. A mutant is killed when at least
one of them fails; the report names the first test that failed. A mutant that survives means a promise no test
holds: the script exits 1.

    .venv/bin/python scripts/mutation_check.py            # every mutant
    .venv/bin/python scripts/mutation_check.py owner-check-signal audit-after-input   # some of them
    .venv/bin/python scripts/mutation_check.py --list

It takes several minutes (each mutant runs real servers), so it is not part of the test command.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from mutants import MUTANTS, Mutant  # noqa: E402


@dataclass
class Outcome:
    mutant: Mutant
    killed: bool
    by: str
    seconds: float


def copy_checkout(into: Path) -> Path:
    """The working tree as it is, without the virtualenv, caches or test databases."""
    target = into / "checkout"
    shutil.copytree(ROOT, target, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", ".venv", "var", "__pycache__", ".pytest_cache", ".coverage*"))
    (target / ".venv").symlink_to(ROOT / ".venv")
    return target


def apply(mutant: Mutant, checkout: Path) -> None:
    path = checkout / mutant.path
    text = path.read_text()
    found = text.count(mutant.find)
    if found != 1:
        raise SystemExit(f"mutant {mutant.name}: expected the text to mutate once in {mutant.path}, found it {found} "
                         "times; update scripts/mutants.py to the code as it is now")
    path.write_text(text.replace(mutant.find, mutant.replace))


FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run(mutant: Mutant, workspace: Path) -> Outcome:
    started = time.monotonic()
    checkout = copy_checkout(workspace)
    apply(mutant, checkout)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:cov",
         "-rfE", *mutant.tests],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=mutant.timeout,
    )
    output = result.stdout + result.stderr
    failed = FAILED.findall(output)
    killed = result.returncode != 0 and bool(failed)
    if result.returncode not in (0, 1) and not failed:
        print(output[-3000:], file=sys.stderr)
        raise SystemExit(f"mutant {mutant.name}: the tests did not run (exit {result.returncode})")
    return Outcome(mutant, killed, failed[0] if failed else "", time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and the promise each one breaks")
    options = parser.parse_args()
    chosen = [mutant for mutant in MUTANTS if not options.names or mutant.name in options.names]
    unknown = set(options.names) - {mutant.name for mutant in MUTANTS}
    if unknown:
        raise SystemExit(f"no such mutant: {', '.join(sorted(unknown))} (see --list)")
    if options.list:
        for mutant in chosen:
            print(f"{mutant.name:32} {mutant.breaks}")
        return 0
    survivors = 0
    for mutant in chosen:
        with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as workspace:
            outcome = run(mutant, Path(workspace))
        verdict = f"killed by {outcome.by}" if outcome.killed else "SURVIVED"
        survivors += not outcome.killed
        print(f"{mutant.name:32} {verdict}  ({outcome.seconds:.0f} s)", flush=True)
    print(f"{len(chosen) - survivors} of {len(chosen)} mutants killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
