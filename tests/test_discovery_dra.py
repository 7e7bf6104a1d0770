"""The DRA source: NVIDIA's DRA driver's ResourceSlices → the snapshot → the same labels."""

from __future__ import annotations

import copy
import functools
from dataclasses import replace
from typing import Any

import pytest

from gfd import snapshot as snapshots
from gfd.discovery import dra
from gfd.errors import DiscoveryError
from gfd.snapshot import Snapshot
from tests.dra_slices import slices_for
from tests.helpers import gpu, labels_of, mig, node
from tests.upstream import PROFILES, Reference, run_on_mock

NODE = "node-a"

#: labels slices cannot carry (README "DRA nodes"): the fabric, the PCI class, the machine
#: type, the vGPU scan, and whether a GPU without MIG enabled could enable it
NOT_IN_SLICES = {
    f"nvidia.com/{name}"
    for name in ("gpu.clique", "gpu.mode", "gpu.machine", "vgpu.present", "mig.capable")
}
#: the driver publishes the driver version through semver, which drops a leading zero
SEMVER_LOSSY = {
    "nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.driver-version.revision",
    "nvidia.com/cuda.driver.rev",
}  # fmt: skip


@pytest.fixture
def mock_lib(upstream_reference: Reference) -> Reference:
    """NVIDIA's mock NVML, under the name the DRA watch tests import it by."""
    return upstream_reference


@functools.cache
def nvml_snapshot(ref: Reference, profile: str) -> Snapshot:
    """gfd's own NVML path on NVIDIA's mock for ``profile`` (a process per profile: the
    library reads its configuration once)."""
    done = run_on_mock(ref, "gfd", ["--dump-snapshot"], profile=profile)
    assert done.returncode == 0, done.stderr[-2000:]
    return snapshots.loads(done.stdout)


@pytest.mark.parametrize("release", ["v25.12.0", "v25.8.0", "v25.3.0"])
@pytest.mark.parametrize("profile", PROFILES)
def test_slices_label_as_nvml_does_on_every_mock_profile(
    mock_lib: Reference, profile: str, release: str
) -> None:
    from_nvml = nvml_snapshot(mock_lib, profile)
    assert from_nvml.gpus, profile
    state = dra.select_pool(slices_for(from_nvml, NODE, release=release, split=2), NODE)
    assert state.complete
    from_slices = dra.to_snapshot(state.slices)
    nvml_labels, dra_labels = labels_of(from_nvml), labels_of(from_slices)
    derivable = set(nvml_labels) - NOT_IN_SLICES - SEMVER_LOSSY
    assert {k: dra_labels.get(k) for k in derivable} == {k: nvml_labels[k] for k in derivable}
    # nothing invented: every label from slices is one NVML gives too
    assert set(dra_labels) <= set(nvml_labels)
    assert "nvidia.com/mig.capable" not in dra_labels  # MIG off: the slices do not say
    assert "nvidia.com/gpu.clique" not in dra_labels
    assert not any(key.startswith("nvidia.com/vgpu") for key in dra_labels)
    # the same GPUs; their order is PCI bus order (slices carry no NVML index since v25.8.0)
    assert sorted(g.uuid for g in from_slices.gpus) == sorted(g.uuid for g in from_nvml.gpus)


def test_semver_drops_the_revisions_leading_zero() -> None:
    snap = node(gpu(0), driver="550.163.01")
    labels = labels_of(dra.to_snapshot(slices_for(snap, NODE)))
    assert labels["nvidia.com/cuda.driver-version.revision"] == "1"
    assert labels["nvidia.com/cuda.driver-version.major"] == "550"


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_mig_devices_give_the_parent_and_its_profiles(strategy: str) -> None:
    parent = gpu(0, mig=mig("1g.5gb", "1g.5gb", "3g.20gb" if strategy == "mixed" else "1g.5gb"))
    plain = gpu(1)
    snap = node(parent, plain) if strategy == "mixed" else node(parent)
    from_slices = dra.to_snapshot(slices_for(snap, NODE))
    got = {g.uuid: g for g in from_slices.gpus}[parent.uuid]
    assert got.mig is not None and got.mig.enabled
    assert parent.mig is not None
    assert [d.profile for d in got.mig.devices] == [d.profile for d in parent.mig.devices]
    assert [d.memory_mib for d in got.mig.devices] == [d.memory_mib for d in parent.mig.devices]
    nvml_labels, dra_labels = labels_of(snap, strategy), labels_of(from_slices, strategy)
    assert any(k.startswith(("nvidia.com/mig-", "nvidia.com/mig.")) for k in nvml_labels)
    # the parent's total memory is not on a MIG device: gpu.memory is not derivable
    derivable = {k for k in nvml_labels if not k.endswith("gpu.memory")} - NOT_IN_SLICES
    assert {k: dra_labels.get(k) for k in derivable} == {k: nvml_labels[k] for k in derivable}


def test_partitionable_form_is_a_mig_capable_gpu_without_its_total_memory() -> None:
    snap = node(gpu(0), gpu(1))
    from_slices = dra.to_snapshot(slices_for(snap, NODE, partitionable=True))
    assert all(g.mig is not None and not g.mig.enabled for g in from_slices.gpus)
    assert all(g.memory_mib is None for g in from_slices.gpus)
    assert "nvidia.com/gpu.memory" not in labels_of(from_slices)
    assert labels_of(from_slices)["nvidia.com/mig.capable"] == "true"


def test_the_highest_complete_generation_wins() -> None:
    old = slices_for(node(gpu(0)), NODE, generation=1)
    new = slices_for(node(gpu(0), gpu(1)), NODE, generation=2, split=2)
    state = dra.select_pool(old + new, NODE)
    assert state.complete and state.generation == 2
    assert len(dra.to_snapshot(state.slices).gpus) == 2


def test_a_generation_still_being_written_is_incomplete() -> None:
    new = slices_for(node(gpu(0), gpu(1)), NODE, generation=2, split=2)
    state = dra.select_pool(slices_for(node(gpu(0)), NODE) + new[:1], NODE)
    assert not state.complete and state.slices == ()
    assert "resourceSliceCount" in state.reason


def test_a_deleted_slice_makes_the_pool_incomplete() -> None:
    pool = slices_for(node(gpu(0), gpu(1), gpu(2)), NODE, split=3)
    assert not dra.select_pool(pool[1:], NODE).complete


def test_other_nodes_and_drivers_are_not_read() -> None:
    mine = slices_for(node(gpu(0)), NODE)
    theirs = slices_for(node(gpu(0), gpu(1)), "node-b")
    other_driver = slices_for(node(gpu(0), gpu(1)), NODE)
    other_driver[0]["spec"]["driver"] = "example.com/gpu"
    state = dra.select_pool(mine + theirs + other_driver, NODE)
    assert len(dra.to_snapshot(state.slices).gpus) == 1


def test_no_driver_is_a_node_without_gpus_and_nothing_invented() -> None:
    state = dra.select_pool([], NODE)
    assert state.complete
    snap = dra.to_snapshot(state.slices)
    assert snap.driver is None and snap.gpus == () and snap.vgpu is None
    labels = labels_of(snap)
    assert not any(key.startswith("nvidia.com/gpu.") for key in labels), labels


def _one_device(**changes: object) -> list[dict[str, object]]:
    pool = slices_for(node(gpu(0)), NODE)
    device = pool[0]["spec"]["devices"][0]
    for key, value in changes.items():
        if value is None:
            device["attributes"].pop(key)
        else:
            device["attributes"][key] = value
    return pool


def test_a_hostile_product_name_is_labelled_safely() -> None:
    odd = "".join(chr(c) for c in (0x7F, 0xFF, 0x202E, 0x0A, 0x00, 0x1F)) * 10 + "zz\t;"
    assert len(odd) == 64
    snap = dra.to_snapshot(_one_device(productName={"string": odd}))
    product = labels_of(snap)["nvidia.com/gpu.product"]
    assert len(product) <= 63 and product.isascii() and "\n" not in product


@pytest.mark.parametrize(("changes", "named"), [
    ({"productName": None}, "productName"),
    ({"cudaComputeCapability": {"version": "x"}}, "cudaComputeCapability"),
    ({"uuid": {"int": 3}}, "uuid"),
    ({"productName": {"string": "A" * 5000}}, "longer than the limit"),
])  # fmt: skip
def test_a_bad_attribute_fails_the_pass_in_one_line(changes: dict[str, object], named: str) -> None:
    with pytest.raises(DiscoveryError) as caught:
        dra.to_snapshot(_one_device(**changes))
    message = str(caught.value)
    assert named in message and "\n" not in message and len(message) < 600


@pytest.mark.parametrize("value", [str(2**63 + 1), "9Ei", "1e400", "-1", "0.5", "x" * 100])
def test_a_capacity_past_any_gpu_fails_the_pass(value: str) -> None:
    pool = slices_for(node(gpu(0)), NODE)
    pool[0]["spec"]["devices"][0]["capacity"]["memory"] = {"value": value}
    with pytest.raises(DiscoveryError) as caught:
        dra.to_snapshot(pool)
    assert "\n" not in str(caught.value)


def test_128_devices_in_one_slice_are_read() -> None:
    gpus = [replace(gpu(i), pci_bus_id=f"0000:{i:02x}:00.0") for i in range(128)]
    snap = dra.to_snapshot(slices_for(node(*gpus), NODE))
    assert len(snap.gpus) == 128
    assert labels_of(snap)["nvidia.com/gpu.count"] == "128"


def test_quantities_in_every_form() -> None:
    assert dra.parse_quantity({"value": "80Gi"}, "m") == 80 << 30
    assert dra.parse_quantity("85899345920", "m") == 85899345920
    assert dra.parse_quantity("1e3", "m") == 1000
    assert dra.parse_quantity("2k", "m") == 2000


def _twice(where: str, kind: str) -> list[dict[str, Any]]:
    """A pool whose ``kind`` device is published a second time: in the same slice, in
    another slice of the pool, or in a second pool of the driver on the node."""
    snap = node(gpu(0, mig=mig("1g.5gb", "1g.5gb")), gpu(1))
    pool = slices_for(snap, NODE, split=2 if where == "another-slice" else 1)

    def of_kind(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [d for d in devices if d["attributes"]["type"]["string"] == kind]

    origin = next(s for s in pool if of_kind(s["spec"]["devices"]))
    again = copy.deepcopy(of_kind(origin["spec"]["devices"])[0])
    if where == "another-pool":
        stale = copy.deepcopy(pool[0])
        stale["metadata"]["name"] = "stale"
        stale["spec"]["pool"]["name"] = "stale-pool"
        stale["spec"]["devices"] = [again]
        return [*pool, stale]
    holder = next(s for s in pool if s is not origin) if where == "another-slice" else origin
    holder["spec"]["devices"].append(again)
    return pool


@pytest.mark.parametrize("kind", ["mig", "gpu"])
@pytest.mark.parametrize("where", ["same-slice", "another-slice", "another-pool"])
def test_a_device_published_twice_fails_the_pass_never_counts_twice(where: str, kind: str) -> None:
    state = dra.select_pool(_twice(where, kind), NODE)
    assert state.complete
    with pytest.raises(DiscoveryError) as caught:
        dra.to_snapshot(state.slices)
    message = str(caught.value)
    assert "twice" in message and "\n" not in message and len(message) < 600
