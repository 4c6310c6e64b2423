"""The shape of the code, kept true: layers import only downwards (docs/design.md has the map),
modules and functions stay small, and each life-cycle changes status in one module only."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "crew"

#: Every module of crew, by layer, lowest first. A module may import its own layer and those
#: below it. A module missing here fails the test: a new module must find its place.
LAYERS: dict[str, tuple[str, ...]] = {
    "base": (
        "crew.errors",
        "crew.env",
        "crew.clock",
        "crew.ids",
        "crew.faults",
        "crew.registry",
        "crew.text",
        "crew.procs",
    ),
    "formats": (
        "crew.config_base",
        "crew.notify_config",
        "crew.config",
        "crew.config_checks",
        "crew.config_salvage",
        "crew.models",
        "crew.paths",
        "crew.session",
        "crew.protocol",
        "crew.frames",
        "crew.attention",
        "crew.line_ends",
    ),
    "store": ("crew.store",),
    "domain": ("crew.domain",),
    "adapters": ("crew.adapters",),
    "verbs": (
        "crew.results",
        "crew.verbs",
        "crew.views",
        "crew.waiting",
        "crew.streams",
        "crew.doctor",
        "crew.scaffold",
        "crew.schemas",
        "crew.validation",
        "crew.housekeeping",
    ),
    "leader": ("crew.leader", "crew.executors"),
    "presentation": (
        "crew.render",
        "crew.textviews",
        "crew.output",
        "crew.render_streams",
        "crew.loglines",
        "crew.dashboard",
        "crew.dashboard_prompt",
        "crew.mcp_server",
        "crew.cli",
        "crew.fast",
        "crew.docgen",
        "crew.__main__",
    ),
}
#: The worker SDK runs inside workers: it needs the protocol and nothing of the leader's side.
SDK = "crew.worker"
SDK_MAY_IMPORT = ("base", "crew.protocol", "crew.frames", "crew.attention", "crew.line_ends")
#: The store's primitives know bytes, files and locks: nothing of crew above the base.
STORE_PRIMITIVES = ("exchange", "files", "jsonl", "lock", "snapshot", "watch")
#: The package itself: its public names load lazily; anything may read `crew.__version__`.
PACKAGE = "crew"

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
#: A function may be longer when the comment line just above its `def` says why.
LONG_FUNCTION_MARK = "# Long:"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path

    @cached_property
    def tree(self) -> ast.Module:
        """Parsed when a test reads it: not by every test process as it collects."""
        return ast.parse(self.path.read_text(), str(self.path))

    @property
    def lines(self) -> int:
        return len(self.path.read_text().splitlines())


def _modules() -> list[Module]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append(Module(name, path))
    return found


MODULES = _modules()
NAMES = {m.name for m in MODULES}


def _layer(name: str) -> str:
    if name == SDK:
        return "sdk"
    for layer, prefixes in LAYERS.items():
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return layer
    raise AssertionError(f"{name} is in no layer: add it to LAYERS (and to docs/design.md)")


def _rank(layer: str) -> int:
    return list(LAYERS).index(layer)


def _imports(module: Module) -> set[str]:
    """Every crew module `module` imports, wherever the import is (lazy ones too)."""
    found: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in NAMES else node.module)
    found.discard(module.name)
    return found


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        if module.name != PACKAGE:
            _layer(module.name)


@pytest.mark.parametrize("module", [m for m in MODULES if m.name != PACKAGE], ids=lambda m: m.name)
def test_layers_import_only_downwards(module: Module) -> None:
    own = _layer(module.name)
    wrong = []
    for target in sorted(_imports(module)):
        if target == PACKAGE:
            continue  # `from crew import __version__`
        theirs = _layer(target)
        if own == "sdk":
            allowed = theirs in SDK_MAY_IMPORT or target in SDK_MAY_IMPORT
        elif theirs == "sdk":
            allowed = False
        elif own == "adapters":
            allowed = theirs in {"base", "formats", "adapters"}
        elif theirs == "adapters":
            allowed = _rank(own) >= _rank("leader")
        else:
            allowed = _rank(theirs) <= _rank(own)
        if not allowed:
            wrong.append(f"{target} ({theirs})")
    assert not wrong, f"{module.name} ({own}) imports above its layer: {', '.join(wrong)}"


@pytest.mark.parametrize("name", STORE_PRIMITIVES)
def test_store_primitives_import_nothing_above_the_base(name: str) -> None:
    (module,) = [m for m in MODULES if m.name == f"crew.store.{name}"]
    above = [t for t in _imports(module) if t != f"crew.store.{name}" and _layer(t) != "base"]
    assert [t for t in above if t.removeprefix("crew.store.") not in STORE_PRIMITIVES] == []


def test_the_leader_imports_no_adapter_by_name() -> None:
    allowed = {"crew.adapters", "crew.adapters.base"}
    for module in MODULES:
        if module.name != PACKAGE and _layer(module.name) in {
            "leader",
            "presentation",
            "verbs",
            "domain",
            "store",
        }:
            named = {t for t in _imports(module) if t.startswith("crew.adapters")} - allowed
            assert not named, f"{module.name} imports {', '.join(sorted(named))}"


#: Path methods that read or write files (standard streams are output, not file I/O).
_PATH_CALLS = frozenset(
    {"read_text", "write_text", "read_bytes", "write_bytes", "unlink", "mkdir", "rename", "touch"}
)
_OS_FILE_CALLS = frozenset(
    {"open", "read", "write", "remove", "unlink", "rename", "replace", "mkdir", "listdir", "pipe"}
)


def test_the_command_line_does_no_file_io() -> None:
    for module in MODULES:
        if not module.name.startswith("crew.cli"):
            continue
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call):
                continue
            func, where = node.func, f"{module.name}:{node.lineno}"
            if isinstance(func, ast.Name):
                assert func.id != "open", f"{where} opens a file"
            elif isinstance(func, ast.Attribute):
                on_os = getattr(func.value, "id", "") == "os"
                assert not (on_os and func.attr in _OS_FILE_CALLS), f"{where} os.{func.attr}"
                assert func.attr not in _PATH_CALLS, f"{where} {func.attr}"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_modules_and_functions_stay_small(module: Module) -> None:
    assert module.lines <= MAX_MODULE_LINES, f"{module.path} has {module.lines} lines"
    source = module.path.read_text().splitlines()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            said_why = start >= 2 and source[start - 2].strip().startswith(LONG_FUNCTION_MARK)
            assert length <= MAX_FUNCTION_LINES or said_why, (
                f"{module.path}:{node.lineno} {node.name} has {length} lines"
            )


#: Each kind of status, and the one module that changes it.
STATUS_HOMES = {
    "TaskStatus": "crew.domain.tasks",
    "MessageStatus": "crew.domain.mailbox",
    "RunStatus": "crew.domain.runs",
}


def _sets_status(node: ast.AST) -> str | None:
    """The status enum a node assigns (`status=X.Y`, `{"status": X.Y}`), if it assigns one."""
    values: list[ast.expr] = []
    if isinstance(node, ast.keyword) and node.arg == "status":
        values.append(node.value)
    elif isinstance(node, ast.Dict):
        values += [
            v
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and k.value == "status"
        ]
    for value in values:
        for part in ast.walk(value):
            if isinstance(part, ast.Name) and part.id in STATUS_HOMES:
                return part.id
    return None


def test_every_status_changes_in_its_one_module() -> None:
    strays = []
    for module in MODULES:
        for node in ast.walk(module.tree):
            kind = _sets_status(node)
            if kind is not None and module.name != STATUS_HOMES[kind]:
                strays.append(f"{module.name}:{getattr(node, 'lineno', '?')} sets a {kind}")
            is_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if is_call and node.func.attr == "transition" and module.name != "crew.domain.tasks":
                strays.append(f"{module.name}:{node.lineno} moves a task")
    assert strays == []


def test_a_status_argument_is_found_when_there_is_one() -> None:
    """The scan above would pass vacuously if it found nothing: it finds the homes' own."""
    found = {
        kind
        for module in MODULES
        if module.name in STATUS_HOMES.values()
        for node in ast.walk(module.tree)
        if (kind := _sets_status(node)) is not None
    }
    assert found == set(STATUS_HOMES)
