"""The shape of the package: no import circle between gfd's modules, so each
module can be read, tested and imported on its own, in any order."""

from __future__ import annotations

import ast
from pathlib import Path

GFD = Path(__file__).resolve().parent.parent / "gfd"


def module_graph() -> dict[str, set[str]]:
    """Module -> the gfd modules it imports when it is imported (top-level statements,
    including those under ``if``/``try`` at module level; imports inside functions are
    lazy by design and do not count).  ``from package import submodule`` depends on the
    submodule, as Python resolves it."""
    files = {}
    for path in GFD.rglob("*.py"):
        parts = path.relative_to(GFD.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        pending = list(ast.parse(path.read_text()).body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.If, ast.Try)):
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    pending.extend(node.orelse)  # the typing-only branch never runs
                    continue
                for block in ("body", "orelse", "finalbody", "handlers"):
                    pending.extend(getattr(node, block, []))
            elif isinstance(node, ast.ExceptHandler):
                pending.extend(node.body)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                if all(sub in files for sub in subs):
                    deps.update(subs)
                else:
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {dep for dep in deps if dep in files and dep != name}
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


def test_no_import_circle_between_gfd_modules() -> None:
    graph = module_graph()
    assert "gfd.agent" in graph and "gfd.documents" in graph["gfd.snapshot"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_the_labels_package_is_pure() -> None:
    """DESIGN: gfd.labels computes, it does no I/O: it never imports the host or API side."""
    graph = module_graph()
    for module, deps in graph.items():
        if module.startswith("gfd.labels"):
            assert not {d for d in deps if d.startswith(("gfd.discovery", "gfd.outputs"))}, module


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
