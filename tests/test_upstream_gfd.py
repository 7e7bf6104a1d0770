"""Upstream GFD's end-to-end label tests (NVIDIA/k8s-device-plugin
``cmd/gpu-feature-discovery/main_test.go`` and ``mig_test.go``) as ours: the same mocked
node as a snapshot, the whole label set compared with the complete expected map, and every
line checked against upstream's own ``tests/expected-output*.txt`` patterns the way
upstream's ``checkResult`` does (each output line must match one of the file's regular
expressions; vGPU lines are checked against ``expected-output-vgpu.txt`` only).

upstream's node: the ``tests/test_upstream_lm.py`` mocks, the machine-type file
``/tmp/machine-type`` holding ``product-name\\n``, and the mock vGPU library (one vGPU
device; the host driver strings below are ours, upstream's patterns accept any)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gfd import snapshot as snapshot_format
from gfd.config import Config
from gfd.labels import build
from gfd.outputs.file import format_labels
from gfd.snapshot import Mig, Snapshot, Vgpu, VgpuDevice
from tests.helpers import table
from tests.process import run_gfd_here
from tests.test_upstream_lm import (
    ARCH_8_0,
    Mock,
    cuda_labels,
    full_gpu,
    gpu_labels,
    manager,
    mig_enabled_device,
    mig_labels,
    new_mig_device,
)

TIMESTAMP = 1700000000
MOCK_VGPU = Vgpu((VgpuDevice("470.63.01", "r470_00"),))

# tests/expected-output.txt (the per-GPU uuid line some versions carry allows a label we
# never make, so it is left out here)
EXPECTED_OUTPUT = r"""
nvidia\.com\/gfd\.timestamp=[0-9]{10}
nvidia\.com\/cuda\.driver\.major=[0-9]+
nvidia\.com\/cuda\.driver\.minor=[0-9]+
nvidia\.com\/cuda\.driver\.rev=[0-9]*
nvidia\.com\/cuda\.runtime\.major=[0-9]+
nvidia\.com\/cuda\.runtime\.minor=[0-9]+
nvidia\.com\/cuda\.driver-version\.major=[0-9]+
nvidia\.com\/cuda\.driver-version\.minor=[0-9]+
nvidia\.com\/cuda\.driver-version\.revision=[0-9]*
nvidia\.com\/cuda\.driver-version\.full=([0-9]+)(.[0-9]+)(.[0-9]+)
nvidia\.com\/cuda\.runtime-version\.major=[0-9]+
nvidia\.com\/cuda\.runtime-version\.minor=[0-9]+
nvidia\.com\/cuda\.runtime-version\.full=([0-9]+)(.[0-9]+)
nvidia\.com\/gpu\.machine=.*
nvidia\.com\/gpu\.count=[0-9]+
nvidia\.com\/gpu\.replicas=[0-9]+
nvidia\.com\/gpu\.sharing-strategy=[none|mps|time-slicing]
nvidia\.com\/gpu\.product=[A-Za-z_-]+
nvidia\.com\/gpu\.memory=[0-9]+
nvidia\.com\/gpu\.family=[a-z]+
nvidia\.com\/gpu\.mode=[unknown|compute|graphics]
nvidia\.com\/mig\.capable=[true|false]
nvidia\.com\/gpu\.compute\.major=[0-9]+
nvidia\.com\/gpu\.compute\.minor=[0-9]+
nvidia\.com\/mps\.capable=[true|false]
"""

# tests/expected-output-vgpu.txt
EXPECTED_OUTPUT_VGPU = r"""
nvidia\.com\/vgpu\.present=[true|false]
nvidia\.com\/vgpu\.host-driver-branch=.*
nvidia\.com\/vgpu\.host-driver-version.*
"""

# tests/expected-output-mig-none.txt is expected-output.txt without the uuid line
EXPECTED_OUTPUT_MIG_NONE = EXPECTED_OUTPUT

_MIG_ATTRIBUTES = r"""
nvidia\.com\/gpu\.multiprocessors=[0-9]+
nvidia\.com\/gpu\.engines\.copy=[0-9]+
nvidia\.com\/gpu\.engines\.decoder=[0-9]+
nvidia\.com\/gpu\.engines\.encoder=[0-9]+
nvidia\.com\/gpu\.engines\.jpeg=[0-9]+
nvidia\.com\/gpu\.engines\.ofa=[0-9]+
nvidia\.com\/gpu\.slices\.gi=[0-9]+
nvidia\.com\/gpu\.slices\.ci=[0-9]+
"""

# tests/expected-output-mig-single.txt
EXPECTED_OUTPUT_MIG_SINGLE = (
    EXPECTED_OUTPUT + r"nvidia\.com\/mig\.strategy=[a-z_-]+" + "\n" + _MIG_ATTRIBUTES
)

# tests/expected-output-mig-mixed.txt
EXPECTED_OUTPUT_MIG_MIXED = (
    EXPECTED_OUTPUT
    + r"""
nvidia\.com\/mig\.strategy=[a-z_-]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.product=[A-Za-z_-]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.count=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.replicas=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.sharing-strategy=[none|mps|time-slicing]
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.memory=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.multiprocessors=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.engines\.copy=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.engines\.decoder=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.engines\.encoder=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.engines\.jpeg=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.engines\.ofa=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.slices\.gi=[0-9]+
nvidia\.com\/mig-[0-9]+g\.[0-9]+gb\.slices\.ci=[0-9]+
"""
)


def check_result(output: str, patterns: str, vgpu: bool) -> None:
    """upstream's checkResult: every (non-)vGPU output line matches one of the patterns
    (Go's MatchString: a match anywhere in the line)."""
    regexps = [re.compile(line) for line in patterns.strip().split("\n")]
    for line in output.rstrip("\n").split("\n"):
        if ("vgpu" in line) != vgpu:
            continue
        assert any(regexp.search(line) for regexp in regexps), line


def mock_node(*devices: Mock) -> Snapshot:
    return manager(*devices, machine="product-name", vgpu=MOCK_VGPU)


def node_wide(mig_capable: bool, timestamp: bool = True) -> dict[str, str]:
    labels = cuda_labels("400", "300", "", "400.300", "8", "0") | {
        "gpu.machine": "product-name", "gpu.mode": "graphics",
        "mig.capable": "true" if mig_capable else "false", "mps.capable": "false",
        "vgpu.present": "true", "vgpu.host-driver-version": "470.63.01",
        "vgpu.host-driver-branch": "r470_00",
    }  # fmt: skip
    if timestamp:
        labels["gfd.timestamp"] = str(TIMESTAMP)
    return labels


FULL_GPU = ARCH_8_0 | gpu_labels(1, 1, "MOCKMODEL", "none")


def mig_resource(resource: str, count: int, profile: str, memory: int, gi: int) -> dict:
    product = f"MOCKMODEL-MIG-{profile}"
    return mig_labels(resource, count, 1, product, "none", memory, gi=gi, ci=0)


def whole(labels: dict[str, str]) -> dict[str, str]:
    return {"nvidia.com/" + key: value for key, value in labels.items()}


MIG_3G_20000 = new_mig_device(3, 0, 20000)
MIG_3G_20 = new_mig_device(3, 0, 20)
MIG_1G_5 = new_mig_device(1, 0, 5)

CASES = [
    # main_test.go TestRunOneshot: expected-output.txt + expected-output-vgpu.txt
    ("TestRunOneshot", (full_gpu(),), "none", True, EXPECTED_OUTPUT, node_wide(False) | FULL_GPU),
    # main_test.go TestRunWithNoTimestamp: the same without gfd.timestamp
    ("TestRunWithNoTimestamp", (full_gpu(),), "none", False, EXPECTED_OUTPUT,
     node_wide(False, timestamp=False) | FULL_GPU),
    # mig_test.go TestMigStrategyNone: count 1, product MOCKMODEL, memory 300; the
    # MIG-enabled device (compute capability 0.0) is labelled without sharing
    ("TestMigStrategyNone", (mig_enabled_device(MIG_3G_20000, MIG_3G_20000),), "none", True,
     EXPECTED_OUTPUT_MIG_NONE, node_wide(True) | gpu_labels(1, 0, "MOCKMODEL", "none")),
    # mig_test.go TestMigStrategySingleForNoMigDevices: mig.strategy single, count 1,
    # product MOCKMODEL, memory 300
    ("TestMigStrategySingleForNoMigDevices", (full_gpu(),), "single", True,
     EXPECTED_OUTPUT_MIG_SINGLE, node_wide(False) | FULL_GPU | {"mig.strategy": "single"}),
    # mig_test.go TestMigStrategySingleForMigDeviceMigDisabled: MIG devices listed on a
    # MIG-disabled GPU are ignored (count 1, product MOCKMODEL, memory 300).  The mock
    # ties MIG capability to MIG mode; a GPU that has MIG devices is MIG-capable, so
    # the snapshot says capable and mig.capable is true here.
    ("TestMigStrategySingleForMigDeviceMigDisabled",
     (Mock(mig=Mig(False, (MIG_3G_20000, MIG_3G_20000))),), "single", True,
     EXPECTED_OUTPUT_MIG_SINGLE, node_wide(True) | FULL_GPU | {"mig.strategy": "single"}),
    # mig_test.go TestMigStrategySingle: count 2, product MOCKMODEL-MIG-3g.20gb, memory 20
    ("TestMigStrategySingle", (mig_enabled_device(MIG_3G_20, MIG_3G_20),), "single", True,
     EXPECTED_OUTPUT_MIG_SINGLE,
     node_wide(True) | mig_resource("gpu", 2, "3g.20gb", 20, 3) | {"mig.strategy": "single"}),
    (
        # mig_test.go TestMigStrategyMixed: mig.strategy mixed, gpu.count 1, product
        # MOCKMODEL, memory 300, a count for mig-3g.20gb and for mig-1g.5gb
        "TestMigStrategyMixed",
        (mig_enabled_device(MIG_3G_20, MIG_1G_5),),
        "mixed",
        True,
        EXPECTED_OUTPUT_MIG_MIXED,
        node_wide(True)
        | gpu_labels(1, 0, "MOCKMODEL", "none")
        | {"mig.strategy": "mixed"}
        | mig_resource("mig-3g.20gb", 1, "3g.20gb", 20, 3)
        | mig_resource("mig-1g.5gb", 1, "1g.5gb", 5, 1),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("devices", "strategy", "timestamp", "patterns", "expected"), table(CASES))
def test_upstream_end_to_end_labels(
    devices: tuple[Mock, ...], strategy: str, timestamp: bool, patterns: str, expected: dict
) -> None:
    built = build(mock_node(*devices), strategy, Config(), TIMESTAMP if timestamp else None)
    assert built.labels == whole(expected)
    output = format_labels(built.labels)
    check_result(output, patterns, vgpu=False)
    check_result(output, EXPECTED_OUTPUT_VGPU, vgpu=True)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "TestRunOneshot"], ids=lambda c: c[0])
def test_upstream_end_to_end_through_the_command(case: tuple, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """The same labels out of the command line (--oneshot, labels on stdout; in-process)."""
    _, devices, strategy, timestamp, patterns, expected = case
    snapshot_file = tmp_path / "node.yaml"
    snapshot_file.write_text(snapshot_format.dumps(mock_node(*devices)))
    args = ["--oneshot", "--snapshot-file", str(snapshot_file), "--mig-strategy", strategy]
    if not timestamp:
        args.append("--no-timestamp")
    result = run_gfd_here(*args)
    assert result.returncode == 0, result.stderr
    published = dict(line.split("=", 1) for line in result.stdout.splitlines())
    if timestamp:
        assert re.fullmatch(r"[0-9]{10}", published.pop("nvidia.com/gfd.timestamp"))
        expected = {k: v for k, v in expected.items() if k != "gfd.timestamp"}
    assert published == whole(expected)
    check_result(result.stdout, patterns, vgpu=False)
    check_result(result.stdout, EXPECTED_OUTPUT_VGPU, vgpu=True)
