"""Small builders for hand-written snapshots in tests, and the YAML classes tests use."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gfd.snapshot import (
    ComputeCapability,
    Driver,
    Fabric,
    Gpu,
    Mig,
    MigDevice,
    MigEngines,
    MigSlices,
    Snapshot,
    Vgpu,
)

#: libyaml's parser and emitter where PyYAML has them: the same documents as the pure-Python
#: ones, several times faster, for test-side reads and writes (gfd's own choice is its own)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"

MIG_PROFILES = {
    "1g.5gb": MigDevice("1g.5gb", 4864, 14, MigSlices(1, 1), MigEngines(1, 0, 0, 0, 0)),
    "1g.5gb+me": MigDevice("1g.5gb+me", 4864, 14, MigSlices(1, 1), MigEngines(1, 1, 0, 1, 1)),
    "2g.10gb": MigDevice("2g.10gb", 9856, 28, MigSlices(2, 2), MigEngines(2, 1, 0, 0, 0)),
    "3g.20gb": MigDevice("3g.20gb", 19968, 42, MigSlices(3, 3), MigEngines(3, 2, 0, 0, 0)),
}


def gpu(
    index: int, name: str = A100, *, memory: int | None = 40960, cc: tuple[int, int] = (8, 0),
    pci_class: int | None = 0x030200, mig: Mig | None = None, fabric: Fabric | None = None,
) -> Gpu:  # fmt: skip
    return Gpu(
        index=index, uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000", name=name,
        pci_bus_id=f"0000:{index + 1:02x}:00.0", pci_class=pci_class, memory_mib=memory,
        compute_capability=ComputeCapability(*cc), mig=mig, fabric=fabric,
    )  # fmt: skip


def mig(*profiles: str, enabled: bool = True) -> Mig:
    return Mig(enabled=enabled, devices=tuple(MIG_PROFILES[p] for p in profiles))


def node(
    *gpus: Gpu, driver: str = "550.54.15", cuda: int = 12040,
    machine: str | None = "DGXA100 920-23687-2530-000", vgpu: Vgpu | None = None,
) -> Snapshot:  # fmt: skip
    return Snapshot(
        driver=Driver(driver, cuda), machine=machine, vgpu=Vgpu() if vgpu is None else vgpu,
        gpus=tuple(gpus),
    )  # fmt: skip


class Clock:
    """A clock that stands still until a test moves ``now``."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


#: SPEC §5.2's per-resource label suffixes, in the order a resource's labels are listed
RESOURCE_SUFFIXES = (
    "product", "count", "replicas", "sharing-strategy", "memory", "machine", "mode", "family",
    "compute.major", "compute.minor", "multiprocessors", "slices.gi", "slices.ci",
    "engines.copy", "engines.decoder", "engines.encoder", "engines.jpeg", "engines.ofa",
)  # fmt: skip

#: the example snapshots the API tests publish, and node n1's labels and annotations that are
#: not gfd's (a stock node's, a device plugin's and an operator's)
SNAPSHOTS = Path(__file__).resolve().parents[1] / "examples" / "snapshots"
SNAPSHOT_A = SNAPSHOTS / "dgx-a100.yaml"
SNAPSHOT_B = SNAPSHOTS / "two-models.yaml"  # fewer labels: some of A's keys disappear
FOREIGN = {
    "kubernetes.io/hostname": "n1", "nvidia.com/gpu.present": "true",
    "nvidia.com/device-plugin.config": "a100",
}  # fmt: skip
FOREIGN_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0"}


def expected_labels(path: Path) -> dict[str, str]:
    """The labels of the snapshot at ``path`` (no MIG strategy, no config, no timestamp)."""
    from gfd.config import Config
    from gfd.labels import build
    from gfd.snapshot import load

    return build(load(str(path)), "none", Config(), None).labels


def labels_of(
    snapshot: Snapshot, strategy: str = "none", config: Any = None, ts: int | None = None
) -> dict[str, str]:
    """The labels ``snapshot`` gets (the default config unless one is given)."""
    from gfd.config import Config
    from gfd.labels import build

    return dict(build(snapshot, strategy, Config() if config is None else config, ts).labels)


def file_labels(path: Path) -> dict[str, str]:
    """The labels of the features file at ``path`` (its expiry header left out)."""
    from gfd.outputs.file import split_features_file

    _, body = split_features_file(path.read_text())
    return dict(line.split("=", 1) for line in body.splitlines())


def table(cases: list[tuple[Any, ...]]) -> list[Any]:
    """Rows (description, *values) of a table-driven test as pytest params, each with its
    description as its id."""
    return [pytest.param(*values, id=description) for description, *values in cases]


@functools.cache
def manifests_tool() -> ModuleType:
    """``scripts/manifests.py`` (kustomize rendering and schema validation) as a module."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "manifests.py"
    spec = importlib.util.spec_from_file_location("gfd_manifests_tool", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module
