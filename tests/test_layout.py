"""The layout shows the architecture, and the import graph keeps it: one core, the PTY runtime, the worker, and
one subpackage per interface. Interfaces depend on the core, never the reverse and never on each other; the
runtime is plain Python that knows nothing of Django or of the rest of the app (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "terminals"
INTERFACES = ("api", "live", "acp", "mcp", "dashboard")
FRAMEWORKS = ("django", "rest_framework", "channels", "drf_spectacular", "daphne", "asgiref")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(module: str, source: str, *, is_package: bool = False) -> set[str]:
    """Every module this source imports, at the top or inside a function, as absolute dotted names."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            # "from . import sessions" imports terminals.sessions, not just terminals
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "terminals":
        return "outside"
    if len(parts) > 1 and parts[1] in INTERFACES:
        return parts[1]
    if len(parts) > 1 and parts[1] in ("runtime", "worker"):
        return parts[1]
    return "core"


# The processes' entry points: they start a worker (in its own process, or inside the embedded server's).
ENTRY_POINTS = ("terminals.management.commands.",)


def violations(module: str, imported: set[str]) -> list[str]:
    own = layer(module)
    found = []
    for target in sorted(imported):
        other = layer(target)
        if other == "worker" and own != "worker" and not module.startswith(ENTRY_POINTS):
            found.append(f"{module} ({own}) imports {target}, which runs in the worker process only: reach a worker "
                         "through terminals.remote")
        elif own == "runtime":
            if other not in ("runtime", "outside") or target.split(".")[0] in FRAMEWORKS:
                found.append(f"{module} (the runtime) imports {target}")
        elif other in INTERFACES and other != own:
            found.append(f"{module} ({own}) imports {target}, which belongs to the {other} interface")
    return found


def app_modules():
    for path in sorted(APP.rglob("*.py")):
        if "migrations" not in path.parts:
            yield module_name(path), path


def test_every_interface_lives_in_its_own_folder():
    for interface in ("api", "live", "acp", "mcp", "dashboard"):
        assert (APP / interface / "__init__.py").is_file(), f"terminals/{interface}/ is missing"
    top = {path.stem for path in APP.glob("*.py")}
    strays = top & {"views", "serializers", "consumers", "acp", "views_acp", "worker", "worker_client", "follow"}
    assert not strays, f"interface or worker modules at the top of terminals/: {strays}"


@pytest.mark.parametrize("module,path", list(app_modules()), ids=lambda value: str(value))
def test_imports_point_inward(module, path):
    imported = imports_of(module, path.read_text(), is_package=path.name == "__init__.py")
    assert violations(module, imported) == []


@pytest.mark.parametrize("module,source,expected", [
    ("terminals.sessions", "from .api import views", "belongs to the api interface"),
    ("terminals.live.consumer", "from ..acp import methods", "belongs to the acp interface"),
    ("terminals.worker.server", "def f():\n    from ..api.serializers import X", "belongs to the api interface"),
    ("terminals.runtime.pty", "from django.conf import settings", "the runtime"),
    ("terminals.runtime.pty", "from ..models import TerminalSession", "the runtime"),
    ("terminals.admin", "from terminals.dashboard import views", "belongs to the dashboard interface"),
    ("terminals.sessions", "def f():\n    from .worker.embedded import ensure_worker", "runs in the worker process"),
    ("terminals.remote.client", "from ..worker import records", "runs in the worker process"),
    ("terminals.live.consumer", "from terminals.worker.server import TerminalWorker", "runs in the worker process"),
])
def test_the_check_catches_an_edge_pointing_the_wrong_way(module, source, expected):
    found = violations(module, imports_of(module, source))
    assert found and expected in found[0]


def test_allowed_edges_pass_the_check():
    assert violations("terminals.worker.server", imports_of("terminals.worker.server", "from ..remote import protocol\n"
                                                                                        "from . import records")) == []
    assert violations("terminals.management.commands.serve",
                      imports_of("terminals.management.commands.serve", "from terminals.worker.embedded import x")) == []
    assert violations("terminals.api.views", imports_of("terminals.api.views", "from .. import sessions\n"
                                                                                  "from . import serializers")) == []
    assert violations("terminals.runtime.shell", imports_of("terminals.runtime.shell", "from .pty import PtySession\n"
                                                                                        "import os")) == []


def import_graph(sources: dict[str, str], packages: frozenset[str] = frozenset()) -> dict[str, set[str]]:
    """Module -> the modules of sources it imports (at the top or inside a function)."""
    graph = {module: imports_of(module, source, is_package=module in packages) for module, source in sources.items()}
    return {module: (imported & graph.keys()) - {module} for module, imported in graph.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of modules that import each other, directly or round a longer loop (Tarjan's strongly connected
    components of more than one module), sorted. An import inside a function counts: it hides a circle, not ends it."""
    order, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(found)


def test_no_import_circle_among_terminals_modules():
    modules = dict(app_modules())
    sources = {module: path.read_text() for module, path in modules.items()}
    packages = frozenset(module for module, path in modules.items() if path.name == "__init__.py")
    assert circles(import_graph(sources, packages)) == []


def test_the_circle_check_catches_a_circle():
    two = {"terminals.audit": "from .exceptions import AuditUnavailable",
           "terminals.exceptions": "def handler():\n    from .audit import audit_refusal"}
    assert circles(import_graph(two)) == [["terminals.audit", "terminals.exceptions"]]
    three = {"terminals.a": "from . import b", "terminals.b": "from .c import x", "terminals.c": "import terminals.a",
             "terminals.d": "from . import a"}
    assert circles(import_graph(three)) == [["terminals.a", "terminals.b", "terminals.c"]]
    assert circles(import_graph({"terminals.a": "from . import b", "terminals.b": "import os"})) == []


# The README's map of the code

def _map_rows(readme: str) -> dict[str, str]:
    """The rows of the README's "The code" table: the first cell's folder (or "terminals/" for the core) -> the row."""
    section = readme.split("\n## The code\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            rows[first.split("`")[1]] = line
    return rows


def unmapped(readme: str, modules: list[str]) -> list[str]:
    """The modules (paths under terminals/) the map does not name in the row of their folder."""
    rows = _map_rows(readme)
    missing = []
    for module in modules:
        folder, _, name = module.rpartition("/")
        row = rows.get(f"terminals/{folder}/" if folder else "terminals/", "")
        if f"`{name}`" not in row:
            missing.append(module)
    return missing


def _modules() -> list[str]:
    return sorted(str(path.relative_to(APP)) for path in APP.rglob("*.py")
                  if "migrations" not in path.parts and path.name != "__init__.py")


def test_the_readme_map_names_every_module():
    """A newcomer finds every file of terminals/ in the README's map, in the row of its folder."""
    readme = (APP.parent / "README.md").read_text()
    assert unmapped(readme, _modules()) == []


def test_the_map_check_catches_a_missing_module():
    readme = (APP.parent / "README.md").read_text()
    assert unmapped(readme, ["runtime/new_part.py", "new_core.py", "live/consumer.py"]) == [
        "runtime/new_part.py", "new_core.py"]
    assert unmapped(readme.replace("`shell.py` (a shell", "`shell` (a shell"), ["runtime/shell.py"]) == [
        "runtime/shell.py"]


# Sizes a reader can take in: no module over 400 lines, no function over 60 (migrations and vendored files aside)

MODULE_LINES, FUNCTION_LINES = 400, 60


def oversized(path: str, source: str) -> list[str]:
    """The module itself if it is over MODULE_LINES, and each function over FUNCTION_LINES, with their sizes."""
    found = []
    lines = len(source.splitlines())
    if lines > MODULE_LINES:
        found.append(f"{path}: {lines} lines (at most {MODULE_LINES})")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LINES:
                found.append(f"{path}: {node.name}() is {length} lines (at most {FUNCTION_LINES})")
    return found


def test_no_module_or_function_is_too_long_to_read():
    """The service's code: the app, its settings, and the client package (the tests are not held to it)."""
    root = APP.parent
    paths = [path for _, path in app_modules()] + sorted((root / "config").glob("*.py")) + sorted(
        (root / "clients" / "python").rglob("*.py"))
    found = []
    for path in paths:
        found += oversized(str(path.relative_to(root)), path.read_text())
    assert found == []


def test_the_size_check_catches_a_long_module_and_a_long_function():
    long_function = "def f():\n" + "    x = 1\n" * 60
    assert oversized("terminals/a.py", long_function) == ["terminals/a.py: f() is 61 lines (at most 60)"]
    assert oversized("terminals/a.py", "x = 1\n" * 401) == ["terminals/a.py: 401 lines (at most 400)"]
    assert oversized("terminals/a.py", "def f():\n" + "    x = 1\n" * 59 + "x = 1\n" * 340) == []
