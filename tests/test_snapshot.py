"""The v1 snapshot format: strict loading with errors that name the path, and round trips."""

from __future__ import annotations

import glob
import re

import pytest
import yaml

from gfd import snapshot
from gfd.errors import SnapshotError

EXAMPLES = sorted(
    glob.glob("examples/snapshots/*.yaml") + glob.glob("tests/fixtures/snapshots/*.yaml")
)

MINIMAL = """
version: v1
driver: {version: "550.54.15", cuda: 12040}
gpus:
- index: 0
  uuid: GPU-1
  name: NVIDIA A100-SXM4-40GB
  compute_capability: {major: 8, minor: 0}
  mig:
    enabled: true
    devices:
    - profile: 1g.5gb
      memory_mib: 4864
      multiprocessors: 14
      slices: {gi: 1, ci: 1}
"""


@pytest.mark.parametrize("path", EXAMPLES)
def test_examples_round_trip(path: str) -> None:
    loaded = snapshot.load(path)
    assert snapshot.loads(snapshot.dumps(loaded)) == loaded
    assert snapshot.loads(snapshot.dumps_json(loaded)) == loaded


def test_optional_keys_take_their_defaults() -> None:
    loaded = snapshot.loads(MINIMAL)
    assert loaded.machine is None
    assert loaded.vgpu == snapshot.Vgpu()
    gpu = loaded.gpus[0]
    assert gpu.pci_class is None and gpu.memory_mib is None and gpu.fabric is None
    assert gpu.mig is not None and gpu.mig.devices[0].engines == snapshot.MigEngines()


def test_pci_class_is_written_in_hex() -> None:
    loaded = snapshot.loads(
        MINIMAL.replace("  uuid: GPU-1\n", "  uuid: GPU-1\n  pci_class: 0x030200\n")
    )
    assert loaded.gpus[0].pci_class == 0x030200
    assert "pci_class: 0x030200" in snapshot.dumps(loaded)


def test_json_is_accepted() -> None:
    document = yaml.safe_load(MINIMAL)
    import json

    assert snapshot.loads(json.dumps(document)) == snapshot.loads(MINIMAL)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("gi: 1", "gi: x"), "gpus[0].mig.devices[0].slices.gi: expected an integer, got 'x'"),
        (("version: v1", "version: v2"), "version: unsupported snapshot version 'v2'"),
        (("  uuid: GPU-1\n", "  uuid: GPU-1\n  colour: red\n"), "gpus[0].colour: unknown key"),
        (("  name: NVIDIA A100-SXM4-40GB\n", ""), "gpus[0].name: required field is missing"),
        (("enabled: true", "enabled: 1"), "gpus[0].mig.enabled: expected true or false, got 1"),
        (('version: "550.54.15"', "version: 550.54"),
         "driver.version: expected a string, got 550.54"),
        (("cuda: 12040", "cuda: -1"), "driver.cuda: expected a non-negative integer, got -1"),
        (("memory_mib: 4864", "memory_mib: true"), "memory_mib: expected an integer, got True"),
        (("slices: {gi: 1, ci: 1}", "slices: [1, 1]"), "slices: expected a mapping"),
        (("gpus:\n", "discovery: cuda\ngpus:\n"),
         "discovery: expected one of nvml, vfio, tegra, dra, got 'cuda'"),
        (("gpus:\n", "discovery: 3\ngpus:\n"), "discovery: expected a string, got 3"),
        (
            ("{major: 8, minor: 0}", "{major: -2, minor: 0}"),
            "gpus[0].compute_capability.major: expected a non-negative integer or -1 (unknown), "
            "got -2",
        ),
        (("{major: 8, minor: 0}", "{major: 8, minor: x}"),
         "gpus[0].compute_capability.minor: expected an integer, got 'x'"),
        (('driver: {version: "550.54.15", cuda: 12040}\n', ""), "driver: required"),
    ],
)  # fmt: skip
def test_malformed_snapshot_names_the_path(edit: tuple[str, str], message: str) -> None:
    text = MINIMAL.replace(*edit)
    assert text != MINIMAL
    with pytest.raises(SnapshotError) as caught:
        snapshot.loads(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_duplicate_gpu_index_is_an_error() -> None:
    document = yaml.safe_load(MINIMAL)
    document["gpus"].append(dict(document["gpus"][0], uuid="GPU-2"))
    with pytest.raises(SnapshotError, match=r"gpus\[1\].index: duplicate index 0"):
        snapshot.from_dict(document)


@pytest.mark.parametrize("text", ["", "version: v1\ngpus: [\n", "- a list", "42"])
def test_broken_documents(text: str) -> None:
    with pytest.raises(SnapshotError):
        snapshot.loads(text)


def test_missing_file_names_the_flag(tmp_path: object) -> None:
    with pytest.raises(SnapshotError, match="--snapshot-file: cannot read"):
        snapshot.load("/nonexistent/snapshot.yaml")


# ----------------------------------------------------------------- lost GPUs

LOST = (
    MINIMAL
    + """lost_gpus:
- {index: 1, reason: 'NVML error on GPU 1 in nvmlDeviceGetUUID: GPU is lost'}
- {pci_bus_id: '0000:b7:00.0', reason: on the PCI bus but not listed by NVML}
"""
)


def test_lost_gpus_round_trip() -> None:
    loaded = snapshot.loads(LOST)
    assert loaded.lost == (
        snapshot.LostGpu(index=1, reason="NVML error on GPU 1 in nvmlDeviceGetUUID: GPU is lost"),
        snapshot.LostGpu(pci_bus_id="0000:b7:00.0", reason="on the PCI bus but not listed by NVML"),
    )
    assert snapshot.loads(snapshot.dumps(loaded)) == loaded
    assert snapshot.loads(snapshot.dumps_json(loaded)) == loaded
    # a healthy node's snapshot is written as before: no lost_gpus key at all
    assert "lost_gpus" not in snapshot.dumps(snapshot.loads(MINIMAL))


@pytest.mark.parametrize(("tail", "message"), [
    ("lost_gpus:\n- {index: 0}\n", "lost_gpus[0].index: GPU 0 is also listed in gpus"),
    ("lost_gpus:\n- {index: -1}\n", "lost_gpus[0].index: expected a non-negative integer"),
    ("lost_gpus:\n- {slot: 3}\n", "lost_gpus[0].slot: unknown key"),
    ("lost_gpus: {index: 1}\n", "lost_gpus"),
])  # fmt: skip
def test_bad_lost_gpus(tail: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=re.escape(message)):
        snapshot.loads(MINIMAL + tail)


def test_lost_gpus_need_a_driver() -> None:
    with pytest.raises(SnapshotError, match="driver: required when the snapshot lists lost"):
        snapshot.loads("version: v1\nlost_gpus:\n- {index: 0}\n")


# ------------------------------------------------------ vfio and tegra (the discovery field)


def test_the_discovery_backend_round_trips_and_nvml_is_not_written() -> None:
    loaded = snapshot.loads(MINIMAL)
    assert loaded.discovery == "nvml"
    assert "discovery" not in snapshot.dumps(loaded)  # an NVML node's dump is as it was
    for kind in ("vfio", "tegra"):
        text = MINIMAL + f"discovery: {kind}\n"
        chosen = snapshot.loads(text)
        assert chosen.discovery == kind
        assert f"discovery: {kind}" in snapshot.dumps(chosen)
        assert snapshot.loads(snapshot.dumps(chosen)) == chosen
        assert snapshot.loads(snapshot.dumps_json(chosen)) == chosen


def test_an_unknown_compute_capability_is_minus_one() -> None:
    text = MINIMAL.replace("{major: 8, minor: 0}", "{major: -1, minor: -1}")
    loaded = snapshot.loads(text)
    assert loaded.gpus[0].compute_capability == snapshot.ComputeCapability(-1, -1)
    assert snapshot.loads(snapshot.dumps(loaded)) == loaded
