"""gfd's real NVML path gives upstream GFD v0.20.0's labels on NVIDIA's mock NVML.

Upstream's binary and ``python -m gfd`` run as real processes on the same mock
``libnvidia-ml.so.1``, machine-type file and faked PCI tree (``tests/upstream.py``),
and their label files must be equal: for each of the mock's profiles and MIG strategies, then
for variations (MIG enabled, GPU names, machine types, sharing configs, vGPU, fabric, two
models).  The mock enables MIG mode but never hands out a MIG device (k8s-test-infra 3b2b865
``pkg/gpu/mocknvml/engine/device.go:1805``), so MIG-enabled cases have none: upstream's
single strategy labels ``<product>-MIG-INVALID``, and gfd the same; MIG devices with real
profiles are in ``tests/test_upstream_gfd.py``.

Where the two differ the difference is asserted exactly: upstream at fault (label values
that are not valid, two GPU models picked at random, a panic on a non-GPU function at a GPU
bus id), or on purpose (a config's ``resources`` renames gfd's resource; a GPU on the bus
that NVML does not list fails gfd's oneshot as lost).  Without ``../shared/nvidia-reference``
the tests skip with one line (unless the bench script's build is at hand); with it they fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gfd.labels.sanitize import is_valid_label_value
from tests.upstream import (
    CLASS_3D,
    CLASS_VGA,
    PROFILES,
    SHARED,
    STRATEGIES,
    Reference,
    Run,
    alike,
    differences,
    edited,
    fake_pci_tree,
    memory,
    namespace_problem,
    pci_tree,
    profile_bus_ids,
    run_both,
    succeeded,
    vgpu_config_space,
    with_mig_enabled,
    with_name,
)

#: the profiles of GPUs that have MIG (A100, Hopper, Blackwell); L40S and T4 have none
MIG_CAPABLE = ("a100", "b200", "gb200", "gb300", "h100")
#: the T4 runs with its GPUs as VGA controllers, so that gpu.mode=graphics is compared too
GRAPHICS = ("t4",)


@pytest.fixture(scope="session")
def mock_reference(upstream_reference: Reference) -> Reference:
    problem = namespace_problem()
    if problem is not None:
        # CI has the shared folder: there a missing piece is a failure, never a skip
        if SHARED.is_dir():
            pytest.fail(problem)
        pytest.skip(problem)
    return upstream_reference


def compare(
    ref: Reference, profile: Path, strategy: str, pci_class: str, work: Path,
    config_file: Path | None = None,
) -> dict[str, str]:  # fmt: skip
    tree = pci_tree(profile, work, pci_class)
    labels = alike(*run_both(ref, profile, work, strategy, config_file, tree=tree))
    # The comparison means something only if both really read the mock and the fake tree.
    assert labels["nvidia.com/gpu.product"].startswith("NVIDIA-")
    assert labels["nvidia.com/gpu.machine"] == "NVIDIA-DGX-Test-920-23687-2530-000"
    mode = "graphics" if pci_class == CLASS_VGA else "compute"
    assert labels["nvidia.com/gpu.mode"] == mode
    assert "nvidia.com/gfd.timestamp" not in labels
    return labels


def differ_only_in(key: str, upstream: dict[str, str], ours: dict[str, str]) -> None:
    """Where upstream labels a value that is no valid label value, the one difference is
    gfd's valid value in its place."""
    assert differences(upstream, ours) == [f"{key}: upstream {upstream[key]!r}, gfd {ours[key]!r}"]
    assert not is_valid_label_value(upstream[key])
    assert is_valid_label_value(ours[key])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", PROFILES)
def test_shipped_profile_labels_equal_upstream(
    mock_reference: Reference, profile: str, strategy: str, tmp_path: Path
) -> None:
    pci_class = CLASS_VGA if profile in GRAPHICS else CLASS_3D
    path = mock_reference.profile(profile)
    labels = compare(mock_reference, path, strategy, pci_class, tmp_path)
    assert labels["nvidia.com/gpu.count"] == str(len(profile_bus_ids(path)))
    assert (strategy == "none") is ("nvidia.com/mig.strategy" not in labels)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", MIG_CAPABLE)
def test_mig_enabled_profile_labels_equal_upstream(
    mock_reference: Reference, profile: str, strategy: str, tmp_path: Path
) -> None:
    path = with_mig_enabled(mock_reference.profile(profile), tmp_path / f"mig-{profile}.yaml")
    labels = compare(mock_reference, path, strategy, CLASS_3D, tmp_path)
    assert labels["nvidia.com/mig.capable"] == "true"
    if strategy == "single":
        # every GPU MIG-enabled and empty: upstream's invalid single-strategy node
        assert labels["nvidia.com/gpu.product"].endswith("-MIG-INVALID")
        assert labels["nvidia.com/gpu.count"] == "0"
    else:
        # none: whole GPUs whatever their MIG mode; mixed: the full GPUs stay (no MIG
        # resources: there are no MIG devices)
        assert not any(key.startswith("nvidia.com/mig-") for key in labels)


SHARING = {"time-slicing": "timeSlicing:\n    renameByDefault: true\n", "mps": "mps:\n"}


def sharing_config(kind: str, replicas: int, into: Path) -> Path:
    into.write_text(
        f"version: v1\nsharing:\n  {SHARING[kind]}    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )
    return into


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    ("kind", "mig_enabled"), [("time-slicing", False), ("mps", False), ("time-slicing", True)]
)
def test_sharing_config_labels_equal_upstream(
    mock_reference: Reference, kind: str, mig_enabled: bool, strategy: str, tmp_path: Path
) -> None:
    """The same config file read by both: replicas, strategy and product follow it alike."""
    profile = mock_reference.profile("a100" if mig_enabled else "h100")
    if mig_enabled:
        profile = with_mig_enabled(profile, tmp_path / "mig-a100.yaml")
    config = sharing_config(kind, 4, tmp_path / "config.yaml")
    labels = compare(mock_reference, profile, strategy, CLASS_3D, tmp_path, config)
    if not mig_enabled:
        assert labels["nvidia.com/gpu.replicas"] == "4"
        assert labels["nvidia.com/gpu.sharing-strategy"] == kind


#: more config files, each with its expected (gpu.product suffix, replicas, sharing strategy)
SHARING_VARIANTS = {
    "time-slicing, not renamed": (
        "timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n",
        ("-SHARED", "3", "time-slicing")),
    "time-slicing, renamed": (
        "timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
        "      rename: nvidia.com/gpu.shared\n      replicas: 3\n",
        ("-SHARED", "3", "time-slicing")),
    "time-slicing, failRequestsGreaterThanOne": (
        "timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 2\n", ("-SHARED", "2", "time-slicing")),
    "mps, renameByDefault": (
        "mps:\n    renameByDefault: true\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 2\n", ("", "2", "mps")),
    "time-slicing of another resource": (
        "timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n",
        ("", "1", "none")),
}  # fmt: skip


@pytest.mark.parametrize("variant", sorted(SHARING_VARIANTS))
def test_sharing_config_variants_label_equal_upstream(
    mock_reference: Reference, variant: str, tmp_path: Path
) -> None:
    text, (suffix, replicas, strategy) = SHARING_VARIANTS[variant]
    config = tmp_path / "config.yaml"
    config.write_text(f"version: v1\nsharing:\n  {text}")
    profile = mock_reference.profile("h100")
    labels = compare(mock_reference, profile, "none", CLASS_3D, tmp_path, config)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" + suffix
    assert labels["nvidia.com/gpu.replicas"] == replicas
    assert labels["nvidia.com/gpu.sharing-strategy"] == strategy


def refused_by_both(upstream_says: str, gfd_says: str, upstream: Run, ours: Run) -> None:
    assert upstream.returncode != 0 and upstream.labels is None
    assert upstream_says in upstream.log
    assert ours.returncode != 0 and ours.labels is None
    assert gfd_says in ours.log


def test_mps_on_mig_enabled_gpus_is_refused_by_both(
    mock_reference: Reference, tmp_path: Path
) -> None:
    profile = with_mig_enabled(mock_reference.profile("a100"), tmp_path / "mig-a100.yaml")
    config = sharing_config("mps", 2, tmp_path / "config.yaml")
    refused_by_both(
        "MPS sharing is not supported for mig devices",
        "MPS sharing is not supported for MIG devices",
        *run_both(mock_reference, profile, tmp_path, "none", config),
    )


@pytest.mark.parametrize("version", ["555.42.06.01", "abc"])
def test_driver_version_upstream_cannot_parse_is_refused_by_both(
    mock_reference: Reference, version: str, tmp_path: Path
) -> None:
    profile = edited(
        mock_reference.profile("h100"), tmp_path / "p.yaml",
        lambda document: document["system"].update(driver_version=version),
    )  # fmt: skip
    refused_by_both(
        f'Version "{version}" does not match format',
        f"driver version '{version}' is not of the form X.Y or X.Y.Z",
        *run_both(mock_reference, profile, tmp_path),
    )


def test_gpus_of_differing_classes_label_mode_unknown_like_upstream(
    mock_reference: Reference, tmp_path: Path
) -> None:
    profile = mock_reference.profile("h100")
    tree = pci_tree(profile, tmp_path)
    (tree / profile_bus_ids(profile)[-1] / "class").write_text(CLASS_VGA + "\n")
    labels = alike(*run_both(mock_reference, profile, tmp_path, tree=tree))
    assert labels["nvidia.com/gpu.mode"] == "unknown"


def test_vgpu_guest_labels_equal_upstream(mock_reference: Reference, tmp_path: Path) -> None:
    """The vGPU capability in the GPUs' config space: both find the host driver there."""
    profile = mock_reference.profile("l40s")
    tree = pci_tree(profile, tmp_path, config=vgpu_config_space("550.54.16", "r550_00"))
    labels = alike(*run_both(mock_reference, profile, tmp_path, tree=tree))
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert labels["nvidia.com/vgpu.host-driver-version"] == "550.54.16"
    assert labels["nvidia.com/vgpu.host-driver-branch"] == "r550_00"


@pytest.mark.parametrize("length", [0, 64, 255])
def test_short_config_space_leaves_out_vgpu_labels_like_upstream(
    mock_reference: Reference, length: int, tmp_path: Path
) -> None:
    """Fewer than 256 bytes of config space (an unprivileged read gives 64): neither scan
    can tell, and both leave every vgpu label out rather than say false."""
    profile = mock_reference.profile("t4")
    config = vgpu_config_space("550.54.16", "r550_00")[:length]
    labels = alike(
        *run_both(
            mock_reference, profile, tmp_path, tree=pci_tree(profile, tmp_path, config=config)
        )
    )
    assert not [key for key in labels if key.startswith("nvidia.com/vgpu.")]
    assert labels["nvidia.com/gpu.count"] == str(len(profile_bus_ids(profile)))


def test_vgpu_capability_on_any_nvidia_function_counts_like_upstream(
    mock_reference: Reference, tmp_path: Path
) -> None:
    """Both scans walk every NVIDIA function on the bus, not only the GPUs NVML lists: a
    bridge (class 0x0680) carrying the vGPU capability marks the node a vGPU guest."""
    profile = mock_reference.profile("t4")
    tree = pci_tree(profile, tmp_path)
    fake_pci_tree(["0000:ff:00.0"], "0x068000", tree, vgpu_config_space("1.2", "r1"))
    labels = alike(*run_both(mock_reference, profile, tmp_path, tree=tree))
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert labels["nvidia.com/vgpu.host-driver-version"] == "1.2"


@pytest.mark.parametrize(
    ("vendor", "pci_class", "mode"),
    [
        ("0x8086", CLASS_3D, "compute"),  # not NVIDIA's: gfd reads only the class
        ("0x10de", "0x068000", "unknown"),  # NVIDIA's, but a bridge, not a GPU
    ],
)
def test_non_gpu_function_at_a_gpu_bus_id_crashes_upstream_not_gfd(
    mock_reference: Reference, vendor: str, pci_class: str, mode: str, tmp_path: Path
) -> None:
    """Upstream at fault: its GetPCIClass reads ``.Class`` through the nil go-nvlib returns
    for a function that is not an NVIDIA GPU (see ``tests/upstream.py``), so a
    oneshot panics and labels nothing.  gfd labels the node; only gpu.mode follows it."""
    profile = mock_reference.profile("h100")
    bus_ids = profile_bus_ids(profile)
    tree = pci_tree(profile, tmp_path)
    (tree / bus_ids[3] / "vendor").write_text(vendor + "\n")
    (tree / bus_ids[3] / "class").write_text(pci_class + "\n")
    upstream, ours = run_both(mock_reference, profile, tmp_path, tree=tree)
    assert upstream.returncode != 0
    assert upstream.labels is None
    assert "invalid memory address or nil pointer dereference" in upstream.log
    assert "internal/resource/nvml-device.go:102" in upstream.log
    labels = succeeded(ours, "gfd")
    assert labels["nvidia.com/gpu.mode"] == mode
    assert labels["nvidia.com/gpu.count"] == str(len(bus_ids))


#: (raw machine type, upstream's label, gfd's where it differs).  Sanitised alike
#: (k8s-device-plugin v0.20.0 internal/lm/resource.go:318) where that is a valid label
#: value; else upstream labels it unchecked (internal/lm/machine-type.go:38, so NFD or the
#: API server refuses the label) and gfd cuts it to 63 characters with alphanumeric ends
#: (SPEC 5.4), so the label is published.
MACHINE_TYPES = [
    ("  DGX A100  \n", "DGX-A100", None),
    ("ProLiant DL380 Gen10 (P12345)\n", "ProLiant-DL380-Gen10-P12345", None),
    ("a/b\\c:d*e\n", "abcde", None),
    ("line1\nline2\n", "line1line2", None),
    ("\u00dcn\u00efc\u00f6d\u00e9 Server\n", "ncd-Server", None),
    ("\n", "", None),
    ("x" * 80 + "\n", "x" * 80, "x" * 63),
    ("PowerEdge R750xa.\n", "PowerEdge-R750xa.", "PowerEdge-R750xa"),
    ("-lead_trail-\n", "-lead_trail-", "lead_trail"),
    ("...\n", "...", ""),
]


@pytest.mark.parametrize(("raw", "theirs", "ours"), MACHINE_TYPES)
def test_machine_type_labels_against_upstream(
    mock_reference: Reference, raw: str, theirs: str, ours: str | None, tmp_path: Path
) -> None:
    profile = mock_reference.profile("t4")
    upstream, mine = run_both(mock_reference, profile, tmp_path, machine_type=raw)
    if ours is None:
        assert alike(upstream, mine)["nvidia.com/gpu.machine"] == theirs
        return
    their_labels, labels = succeeded(upstream, "upstream"), succeeded(mine, "gfd")
    assert (their_labels["nvidia.com/gpu.machine"], labels["nvidia.com/gpu.machine"]) == (
        theirs, ours,
    )  # fmt: skip
    differ_only_in("nvidia.com/gpu.machine", their_labels, labels)


LONG_NAME = "NVIDIA A100-SXM4-40GB " + "Extra-Long-Qualifier " * 3
LONG_PRODUCT = "NVIDIA-A100-SXM4-40GB" + "-Extra-Long-Qualifier" * 3
#: (GPU name, MIG enabled, strategy, upstream's gpu.product, gfd's gpu.product)
PRODUCT_NAMES = [
    ("NVIDIA TITAN X (Pascal)", False, "mixed", "NVIDIA-TITAN-X-Pascal", None),
    ("NVIDIA TITAN X (Pascal)", True, "single", "NVIDIA-TITAN-X-Pascal-MIG-INVALID", None),
    ("  NVIDIA  Spaced  ", False, "none", "NVIDIA-Spaced", None),
    ("(NVIDIA)", True, "single", "NVIDIA-MIG-INVALID", None),
    ("NVIDIA Test.", True, "single", "NVIDIA-Test.-MIG-INVALID", None),
    ("NVIDIA\tTab", False, "none", "NVIDIATab", None),
    ("\u00dcn\u00efc\u00f6d\u00e9 GPU", False, "none", "ncd-GPU", None),
    # Below, upstream's value is no valid label value (longer than 63 characters, or not
    # ending alphanumeric): k8s-device-plugin v0.20.0 internal/lm/resource.go:167 and
    # mig-strategy.go:256 label getProductName (resource.go:189-206) unchecked, and NFD or
    # the API server refuses the label.  gfd shortens the model part only, keeping the
    # qualifiers whole (SPEC 5.4; gfd.labels.sanitize.fit_name).
    ("NVIDIA Test.", False, "none", "NVIDIA-Test.", "NVIDIA-Test"),
    ("NVIDIA_Under_", False, "none", "NVIDIA_Under_", "NVIDIA_Under"),
    ("-", False, "none", "-", ""),
    (LONG_NAME, False, "none", LONG_PRODUCT, LONG_PRODUCT[:63]),
    (LONG_NAME, True, "single", LONG_PRODUCT + "-MIG-INVALID",
     "NVIDIA-A100-SXM4-40GB-Extra-Long-Qualifier-Extra-Lo-MIG-INVALID"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "mig_enabled", "strategy", "theirs", "ours"), PRODUCT_NAMES)
def test_product_name_labels_against_upstream(
    mock_reference: Reference, name: str, mig_enabled: bool, strategy: str, theirs: str,
    ours: str | None, tmp_path: Path,
) -> None:  # fmt: skip
    profile = with_name(mock_reference.profile("a100"), name, tmp_path / "named.yaml")
    if mig_enabled:
        profile = with_mig_enabled(profile, tmp_path / "named-mig.yaml")
    upstream, mine = run_both(mock_reference, profile, tmp_path, strategy)
    their_labels, labels = succeeded(upstream, "upstream"), succeeded(mine, "gfd")
    assert their_labels["nvidia.com/gpu.product"] == theirs
    if ours is None:
        alike(upstream, mine)
    else:
        assert labels["nvidia.com/gpu.product"] == ours
        differ_only_in("nvidia.com/gpu.product", their_labels, labels)


@pytest.mark.parametrize(
    ("others", "strategy"),
    [*((range(4, 8), strategy) for strategy in STRATEGIES), (range(0, 1), "none")],
)
def test_two_models_upstream_picks_one_at_random_gfd_keeps_what_agrees(
    mock_reference: Reference, others: range, strategy: str, tmp_path: Path
) -> None:
    """Upstream non-deterministic: with two GPU models it builds one labeler per model from
    a Go map (k8s-device-plugin v0.20.0 ``internal/lm/mig-strategy.go:137-177``, ranged
    over at :170) and the last one wins, so gpu.product, gpu.count and gpu.memory are one
    model's, at random.  gfd counts every GPU and leaves out what the models disagree on
    (SPEC 5.3).  Everything else is equal."""

    def renamed(document: dict[str, Any]) -> None:
        for index in others:
            document["devices"][index].update(name="NVIDIA H100 PCIe", memory=memory(40 << 30))

    profile = edited(mock_reference.profile("h100"), tmp_path / "p.yaml", renamed)
    upstream, ours = run_both(mock_reference, profile, tmp_path, strategy)
    theirs, labels = succeeded(upstream, "upstream"), succeeded(ours, "gfd")
    models = {
        "NVIDIA-H100-80GB-HBM3": (str(8 - len(others)), "81920"),
        "NVIDIA-H100-PCIe": (str(len(others)), "40960"),
    }
    picked = theirs["nvidia.com/gpu.product"]
    assert (theirs["nvidia.com/gpu.count"], theirs["nvidia.com/gpu.memory"]) == models[picked]
    assert labels["nvidia.com/gpu.count"] == "8"
    assert "nvidia.com/gpu.product" not in labels
    assert "nvidia.com/gpu.memory" not in labels
    apart = {"nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory"}
    alike_ = {key: value for key, value in theirs.items() if key not in apart}
    assert {key: value for key, value in labels.items() if key not in apart} == alike_


CLUSTER = "00000000-0000-0000-0000-000000000001"
#: (fabric of every GPU, fabric of GPU 1 alone or None, gpu.clique or None)
FABRICS = [
    ({"cluster_uuid": CLUSTER, "clique_id": 7, "state": "completed"}, None, f"{CLUSTER}.7"),
    ({"cluster_uuid": "ABCDEF01-2345-6789-abcd-ef0123456789", "clique_id": 4294967295}, None,
     "abcdef01-2345-6789-abcd-ef0123456789.4294967295"),
    ({"cluster_uuid": "00000000-0000-0000-0000-000000000000", "clique_id": 0}, None, None),
    ({"cluster_uuid": CLUSTER, "clique_id": 7, "state": "in_progress"}, None, None),
    (None, None, None),
    ({"cluster_uuid": CLUSTER, "clique_id": 0, "state": "auto"},
     {"cluster_uuid": CLUSTER, "clique_id": 3, "state": "auto"}, None),
]  # fmt: skip


@pytest.mark.parametrize(("fabric", "one_gpu", "clique"), FABRICS)
def test_fabric_clique_labels_equal_upstream(
    mock_reference: Reference, fabric: dict[str, object] | None, one_gpu: dict[str, object] | None,
    clique: str | None, tmp_path: Path,
) -> None:  # fmt: skip
    """NVLink fabric attachment (GB200): the clique label when every GPU is attached to
    one cluster and clique, none otherwise, alike."""

    def attached(document: dict[str, Any]) -> None:
        document["device_defaults"].pop("fabric", None)
        if fabric is not None:
            document["device_defaults"]["fabric"] = fabric
        if one_gpu is not None:
            document["devices"][1]["fabric"] = one_gpu

    profile = edited(mock_reference.profile("gb200"), tmp_path / "fabric.yaml", attached)
    labels = alike(*run_both(mock_reference, profile, tmp_path))
    assert labels.get("nvidia.com/gpu.clique") == clique


def test_resources_section_renames_in_gfd_only(mock_reference: Reference, tmp_path: Path) -> None:
    """On purpose: upstream ignores a config's ``resources`` (k8s-device-plugin v0.20.0
    ``api/config/v1/config.go:83-95``, DisableResourceNamingInConfig, with one warning)
    while gfd names the resource from it (SPEC 5.3): upstream's labels under the new name."""
    profile = mock_reference.profile("h100")
    config = tmp_path / "config.yaml"
    config.write_text(
        'version: v1\nresources:\n  gpus:\n  - pattern: "NVIDIA H100*"\n    name: h100\n'
    )
    upstream, ours = run_both(mock_reference, profile, tmp_path, "none", config)
    theirs, labels = succeeded(upstream, "upstream"), succeeded(ours, "gfd")
    assert "not yet supported in the config. Ignoring" in upstream.log
    # gpu.clique is the node's (its NVLink fabric), not the resource's: it keeps its name
    renamed = {
        key if key == "nvidia.com/gpu.clique" else key.replace("/gpu.", "/h100."): value
        for key, value in theirs.items()
    }
    assert labels == renamed
    assert labels["nvidia.com/h100.count"] == "8"


#: NVML facts of the whole node or of every GPU: (system keys, device keys, labels expected)
NVML_FACTS = {
    "driver X.Y": ({"driver_version": "560.28"}, {}, {"nvidia.com/cuda.driver.rev": ""}),
    "driver 470, CUDA 11.4": (
        {"driver_version": "470.256.02", "cuda_version_major": 11, "cuda_version_minor": 4}, {},
        {"nvidia.com/cuda.runtime-version.full": "11.4"}),
    "CUDA 12.10": ({"cuda_version_major": 12, "cuda_version_minor": 10}, {},
                   {"nvidia.com/cuda.runtime-version.full": "12.10"}),
    **{
        f"compute {major}.{minor}": (
            {}, {"compute_capability": {"major": major, "minor": minor}},
            {"nvidia.com/gpu.family": family})
        for major, minor, family in [(3, 7, "kepler"), (7, 5, "turing"), (8, 9, "ada-lovelace"),
                                     (12, 0, "blackwell"), (14, 0, "undefined")]
    },
    "memory not whole MiB": (
        {}, {"memory": {"total_bytes": 85899346043, "reserved_bytes": 0, "free_bytes": 0}},
        {"nvidia.com/gpu.memory": "81920"}),
    "memory under 1 MiB": (
        {}, {"memory": {"total_bytes": 1048575, "reserved_bytes": 0, "free_bytes": 0}},
        {"nvidia.com/gpu.memory": None}),  # 0 MiB: no memory label on either
}  # fmt: skip


@pytest.mark.parametrize("fact", sorted(NVML_FACTS))
def test_nvml_facts_label_equal_upstream(
    mock_reference: Reference, fact: str, tmp_path: Path
) -> None:
    system, defaults, expected = NVML_FACTS[fact]

    def facts(document: dict[str, Any]) -> None:
        document["system"].update(system)
        document["device_defaults"].update(defaults)

    profile = edited(mock_reference.profile("h100"), tmp_path / "profile.yaml", facts)
    labels = compare(mock_reference, profile, "none", CLASS_3D, tmp_path)
    assert {key: labels.get(key) for key in expected} == expected


def test_mig_pending_only_is_mig_disabled_like_upstream(
    mock_reference: Reference, tmp_path: Path
) -> None:
    """MIG enabled at the next reset only: whole GPUs for both, even under single."""
    mig = {"mode_current": "disabled", "mode_pending": "enabled", "max_gpu_instances": 7}
    profile = edited(
        mock_reference.profile("a100"), tmp_path / "pending.yaml",
        lambda document: document["device_defaults"].update(mig=mig),
    )  # fmt: skip
    labels = compare(mock_reference, profile, "single", CLASS_3D, tmp_path)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"


@pytest.mark.parametrize("driver", [None, "nvidia", "vfio-pci"])
def test_gpu_on_the_bus_nvml_does_not_list(
    mock_reference: Reference, driver: str | None, tmp_path: Path
) -> None:
    """One more NVIDIA 3D controller on the bus than NVML lists.  Bound to vfio-pci (a
    passthrough GPU NVML never lists) both label NVML's GPUs alike.  Unbound or bound to
    nvidia, it is a lost GPU to gfd, on purpose (README "A lost GPU"): a oneshot fails
    (exit 1, nothing written) where upstream, which never compares NVML's list with the bus
    (k8s-device-plugin v0.20.0 ``internal/lm/mig-strategy.go:114-145``), labels the rest."""
    profile = mock_reference.profile("t4")
    tree = pci_tree(profile, tmp_path)
    fake_pci_tree(["0000:fe:00.0"], CLASS_3D, tree)
    if driver is not None:
        (tmp_path / "drivers" / driver).mkdir(parents=True)
        (tree / "0000:fe:00.0" / "driver").symlink_to(tmp_path / "drivers" / driver)
    upstream, ours = run_both(mock_reference, profile, tmp_path, tree=tree)
    theirs = succeeded(upstream, "upstream")
    assert theirs["nvidia.com/gpu.count"] == str(len(profile_bus_ids(profile)))
    if driver == "vfio-pci":
        alike(upstream, ours)
    else:
        assert ours.returncode == 1
        assert ours.labels is None
        assert "1 GPU(s) lost (on the PCI bus but not listed by NVML)" in ours.log
