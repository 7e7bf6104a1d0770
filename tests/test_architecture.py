"""The package's shape: no import circle (function-level imports counted), layers depend downwards,
modules and functions stay small. Each allowance lists today's exceptions; a stale entry fails."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

GFD = Path(__file__).resolve().parent.parent / "gfd"

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60

#: third-party and standard modules that may be imported inside a function: each is heavy or
#: optional, and the paths that never need it (a plain oneshot, the file output) never load it
LAZY_DEPENDENCIES = frozenset({
    "kubernetes", "prometheus_client", "pynvml", "urllib3", "tenacity", "yaml", "click",
    "structlog", "decimal", "ssl", "http",
})  # fmt: skip

#: the layers, lowest first; a module sits in the layer of the longest prefix named here.  A
#: module may import from its own layer and those below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # base utilities: no knowledge of options, snapshots or the API
    ("gfd", "gfd.errors", "gfd.echo", "gfd.durations", "gfd.files", "gfd.grammar",
     "gfd.interrupt", "gfd.redaction", "gfd.signals", "gfd.documents", "gfd.logsink",
     "gfd.config_choice", "gfd.output_kinds", "gfd.partition_table"),
    # the models: the option table, the config file, the snapshot; logging and metrics
    ("gfd.settings", "gfd.config", "gfd.snapshot", "gfd.observability", "gfd.metrics"),
    # reading the host and computing the labels
    ("gfd.discovery", "gfd.labels"),
    # the Kubernetes API client
    ("gfd.kube",),
    # what reads the API and what publishes
    ("gfd.nodeconfig", "gfd.dra_source", "gfd.outputs"),
    # the daemon's loop
    ("gfd.agent",),
    # the entry points
    ("gfd.cli", "gfd.launch", "gfd.__main__"),
)  # fmt: skip

#: the imports allowed to run from a lower layer to a higher one (at most two), by name
UPWARD_IMPORTS: frozenset[tuple[str, str]] = frozenset()

#: known import circles, to be broken by their owners (the logging modules): each pair is one
#: circle; the list must end empty
KNOWN_CIRCLES_TO_BREAK: frozenset[frozenset[str]] = frozenset()

#: the function-local imports of gfd's own modules, by design, each with its reason: the entry
#: point installs the signal handlers before the rest of gfd is imported, so a stop signal
#: during start-up is handled (exit 0) instead of killing the interpreter mid-import
LAZY_BY_DESIGN: frozenset[tuple[str, str, str]] = frozenset({
    ("gfd.launch", "main", "gfd.cli"), ("gfd.launch", "main", "gfd.signals"),
    ("gfd.launch", "main", "logging"),
    # the handlers' own module imports nothing of gfd before they are installed
    ("gfd.signals", "ignore_reload", "gfd.interrupt"),
    # the module made of prometheus_client's and http.server's classes: loaded only where
    # --metrics-address asks for it, as prometheus_client itself is (SPEC §9)
    ("gfd.observability", "start_metrics", "gfd.metrics"),
})  # fmt: skip

#: functions over MAX_FUNCTION_LINES today, as "module.qualified_name"; their owners shorten them
LONG_FUNCTIONS_TO_SHORTEN: frozenset[str] = frozenset()

#: modules over MAX_MODULE_LINES today; their owners split them
LONG_MODULES_TO_SPLIT: frozenset[str] = frozenset()


def modules() -> dict[str, Path]:
    files = {}
    for path in GFD.rglob("*.py"):
        parts = path.relative_to(GFD.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _runtime_nodes(tree: ast.AST) -> Iterator[tuple[ast.AST, str | None]]:
    """Every node that runs, with the name of the function it sits in (None: module level);
    the typing-only branch (``if TYPE_CHECKING:``) never runs and is skipped."""
    pending: list[tuple[ast.AST, str | None, str]] = [(tree, None, "")]
    while pending:
        node, function, prefix = pending.pop()
        yield node, function
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                pending.extend((sub, function, prefix) for sub in child.orelse)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                pending.append((child, function or f"{prefix}{child.name}", ""))
            elif isinstance(child, ast.ClassDef):
                pending.append((child, function, f"{prefix}{child.name}."))
            else:
                pending.append((child, function, prefix))


def imports(files: dict[str, Path]) -> list[tuple[str, str | None, str]]:
    """(module, function or None, imported) for every import that runs.  ``from package
    import submodule`` imports the submodule, as Python resolves it."""
    found = []
    for name, path in files.items():
        for node, function in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = subs if all(sub in files for sub in subs) else [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            found.extend((name, function, target) for target in targets)
    return found


def module_graph() -> dict[str, set[str]]:
    """Module -> the gfd modules it imports, at module level or inside its functions."""
    files = modules()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for module, _, target in imports(files):
        if target in files and target != module:
            graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                found.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, path)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    return found


def layer_of(module: str) -> int:
    best, level = -1, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, level = len(name), index
    return level


def test_no_import_circle_between_gfd_modules() -> None:
    graph = module_graph()
    assert "gfd.agent" in graph and "gfd.documents" in graph["gfd.snapshot"]
    known = {frozenset(pair) for pair in KNOWN_CIRCLES_TO_BREAK}
    found = [circle for circle in cycles(graph) if frozenset(circle) not in known]
    assert found == []
    still = {pair for pair in known if any(frozenset(c) == pair for c in cycles(graph))}
    assert still == known, f"no longer circles, remove them: {sorted(map(sorted, known - still))}"


def test_the_graph_counts_imports_inside_functions() -> None:
    tree = ast.parse("def f():\n    import gfd.errors\nif TYPE_CHECKING:\n    import gfd.echo\n")
    runs = [
        (function, node.names[0].name) for node, function in _runtime_nodes(tree)
        if isinstance(node, ast.Import)
    ]  # fmt: skip
    assert runs == [("f", "gfd.errors")]


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_every_module_sits_in_a_layer() -> None:
    assert [module for module in modules() if layer_of(module) < 0] == []
    assert layer_of("gfd.kube.client") > layer_of("gfd.settings") > layer_of("gfd.errors")
    assert layer_of("gfd.nodeconfig") > layer_of("gfd.kube") > layer_of("gfd.labels.keys")


def test_imports_run_downwards_but_for_at_most_two_named_ones() -> None:
    upward = {
        (module, dep) for module, deps in module_graph().items() for dep in deps
        if layer_of(dep) > layer_of(module)
    }  # fmt: skip
    assert upward == set(UPWARD_IMPORTS)
    assert len(UPWARD_IMPORTS) <= 2


def test_a_lazy_import_is_a_named_heavy_dependency() -> None:
    files = modules()
    lazy = {
        (module, function, target) for module, function, target in imports(files)
        if function is not None and target.split(".")[0] not in LAZY_DEPENDENCIES
    }  # fmt: skip
    assert lazy - LAZY_BY_DESIGN == set(), "hoist these to the top of their module"
    assert LAZY_BY_DESIGN - lazy == set(), "gone: remove them from LAZY_BY_DESIGN"


def _functions(tree: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def test_no_function_is_longer_than_the_limit() -> None:
    long = set()
    for module, path in modules().items():
        for name, node in _functions(ast.parse(path.read_text()), f"{module}."):
            assert node.end_lineno is not None
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.add(name)
    assert long - LONG_FUNCTIONS_TO_SHORTEN == set()
    assert LONG_FUNCTIONS_TO_SHORTEN - long == set(), "short now: remove from the list"


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        module for module, path in modules().items()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }  # fmt: skip
    assert long - LONG_MODULES_TO_SPLIT == set()
    assert LONG_MODULES_TO_SPLIT - long == set(), "short now: remove from the list"


def test_the_labels_package_is_pure() -> None:
    """DESIGN: gfd.labels computes, it does no I/O: it never imports the host or API side."""
    graph = module_graph()
    for module, deps in graph.items():
        if module.startswith("gfd.labels"):
            assert not {d for d in deps if d.startswith(("gfd.discovery", "gfd.outputs"))}, module
            assert not {d for d in deps if d.startswith("gfd.kube")}, module


def test_the_labels_package_imports_no_host_or_api_library() -> None:
    forbidden = ("pynvml", "kubernetes", "urllib3", "socket", "subprocess", "gfd.discovery")
    for path in (GFD / "labels").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"
