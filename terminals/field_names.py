"""The names a request may give, and what to say about one it may not: every interface (REST bodies and query
strings, ACP params, MCP tool arguments) refuses an unknown name instead of ignoring it, since a misspelt option
that is ignored looks like one that was obeyed ({"cwdir": ...} would start a terminal in the home directory)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .redaction import redact

SHOWN = 40  # characters of an unknown name quoted back: enough to recognise it, never a whole pasted body


def shown(name: str) -> str:
    """A name as a message quotes it: keys masked, cut short."""
    return redact(str(name))[:SHOWN]


def unknown(given: Iterable[str], accepted: Iterable[str]) -> list[str]:
    """The given names that are not accepted, in a stable order."""
    accepted = set(accepted)
    return sorted(str(name) for name in given if name not in accepted)


def _folded(name: str) -> str:
    # strip_ansi, strip-ansi, StripAnsi and stripAnsi are one name to someone who misremembers the spelling.
    return name.replace("_", "").replace("-", "").lower()


def meant(name: str, accepted: Iterable[str]) -> str | None:
    """The accepted name that was probably meant: the same name spelt another way, else the closest one."""
    folded = {_folded(candidate): candidate for candidate in sorted(accepted)}
    if _folded(name) in folded:
        return folded[_folded(name)]
    close = difflib.get_close_matches(_folded(name), list(folded), n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def problem(name: str, accepted: Iterable[str], kind: str = "field") -> str:
    """What is wrong with one unknown name and what to send instead, e.g.
    "unknown field 'cwdir'; did you mean 'cwd'? (the fields are: args, command, cwd, ...)"."""
    accepted = sorted(accepted)
    guess = meant(name, accepted)
    hint = f"; did you mean {guess!r}?" if guess else ""
    plural = kind + "s" if not kind.endswith("s") else kind
    listed = f" (the {plural} are: {', '.join(accepted)})" if accepted else f" (this takes no {plural})"
    return f"unknown {kind} {shown(name)!r}{hint}{listed}"
