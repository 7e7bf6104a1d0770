"""Driver libraries are files too: whatever gfd hands the dynamic loader by path is
checked like whatever it reads (gfd/files.py ``load_regular``) before the loader sees it.
The fault cells are in tests/test_fault_matrix.py (driver libraries); this is the check
that no code path loads a library another way."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.process import ROOT

GFD = Path(ROOT) / "gfd"
#: the one place gfd calls the dynamic loader
LOADERS = {"gfd/discovery/driver_root.py"}
LOADER_NAMES = {"CDLL", "PyDLL", "LoadLibrary", "dlopen", "cdll", "pydll", "LibraryLoader"}


def _loads(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        if name in LOADER_NAMES:
            lines.append(node.lineno)
    return lines


def test_every_library_gfd_loads_goes_through_the_check() -> None:
    found = {}
    for path in sorted(GFD.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if _loads(path):
            found[relative] = _loads(path)
    assert set(found) == LOADERS, found
    source = (GFD / "discovery" / "driver_root.py").read_text()
    # a path goes through load_regular; only a bare name (the loader's search path) not
    assert "return load_regular(path, " in source
    assert "if os.sep not in path:\n        return ctypes.CDLL(path, mode=mode)" in source


def test_the_check_finds_a_plain_load(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("import ctypes\n\ndef f(p):\n    return ctypes.CDLL(p)\n")
    assert _loads(source) == [4]
