"""``--driver-root-ctr-path``: where the host's driver root is mounted in the container.

Upstream resolves a driver library inside the root the same way wherever it has one
(go-nvlib pkg/nvlib/info/root.go, cmd/nvidia-device-plugin/root.go, tryResolveLibrary):
the root ``""`` or ``/`` means "by name, through the loader's search path"; otherwise the
library is looked for in six library directories under the root, symlinks resolved, and
when none has it the bare name is used again.  gfd loads ``libnvidia-ml.so.1`` (NVML) and
``libcuda.so.1`` (the tegra strategy) through this, so a driver root mounted without the
NVIDIA container runtime still works; upstream's default, ``/driver-root``, is usually
absent in a GFD container, and then the loader's search path decides, as before.

A library found under the root is checked before the loader sees it (gfd.files
``load_regular``): a FIFO, a device, a directory or an over-size file planted there is
refused in one line instead of blocking or exhausting the loader.
"""

from __future__ import annotations

import ctypes
import os

from gfd.files import load_regular

#: upstream's search list, in its order
LIBRARY_DIRECTORIES = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
)


def resolve_library(root: str, name: str) -> str:
    """The path to load ``name`` from under ``root``, or ``name`` itself (by name)."""
    if root in ("", "/"):
        return name
    for directory in LIBRARY_DIRECTORIES:
        candidate = os.path.join(root, directory.lstrip("/"), name)
        try:
            # like Go's filepath.EvalSymlinks: every link followed, the target must exist
            return os.path.realpath(candidate, strict=True)
        except (OSError, ValueError):
            continue
    return name


def load_shared(path: str, mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
    """The shared library at ``path`` (a bare name: through the loader's search path).

    A path is checked first (gfd.files.load_regular).  Raises gfd.files.UnreadableFileError
    for a file that is not one, OSError for one the loader refuses."""
    if os.sep not in path:
        return ctypes.CDLL(path, mode=mode)
    return load_regular(path, lambda checked: ctypes.CDLL(checked, mode=mode))
