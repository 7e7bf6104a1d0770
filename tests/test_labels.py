"""Unit tests of the labelling engine on small hand-written snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gfd.config import Config
from gfd.errors import ConfigError, LabelError
from gfd.labels import build
from gfd.outputs.file import format_labels
from gfd.settings import parse_config_text
from gfd.snapshot import (
    Fabric,
    Gpu,
    LostGpu,
    Mig,
    MigDevice,
    MigEngines,
    MigSlices,
    Snapshot,
    Vgpu,
    VgpuDevice,
)
from tests.helpers import H100, RESOURCE_SUFFIXES, gpu, labels_of, mig, node, table

P = "nvidia.com/"


def config(text: str) -> Config:
    return parse_config_text(text, "test.yaml").config


def resource(labels: dict[str, str], name: str) -> dict[str, str]:
    """The labels of one resource, keyed by suffix (``mig-1g.5gb`` excludes ``mig-1g.5gb.me``)."""
    prefix = f"{P}{name}."
    found = {k[len(prefix) :]: v for k, v in labels.items() if k.startswith(prefix)}
    return {suffix: v for suffix, v in found.items() if suffix in RESOURCE_SUFFIXES}


def pairs(text: str) -> dict[str, str]:
    """'a=x b=y' as a mapping."""
    return dict(item.split("=", 1) for item in text.split())


def expect(labels: dict[str, str], wanted: str, prefix: str = P) -> None:
    """Each ``key=value`` of ``wanted`` (keys without ``prefix``) is among ``labels``."""
    want = pairs(wanted)
    assert {key: labels.get(prefix + key) for key in want} == want


# ----------------------------------------------------------------- node-wide labels


@pytest.mark.parametrize("version", ["550", "550.54.15.1", "550..1", "", "r550.x y"])
def test_malformed_driver_version_fails_the_pass(version: str) -> None:
    with pytest.raises(LabelError, match="driver version"):
        labels_of(node(gpu(0), driver=version))


def test_zero_gpus_give_only_timestamp_and_vgpu() -> None:
    snapshot = Snapshot(driver=None, machine="x", vgpu=Vgpu(), gpus=())
    assert build(snapshot, "mixed", Config(), 1700000000).labels == {
        P + "gfd.timestamp": "1700000000", P + "vgpu.present": "false",
    }  # fmt: skip


def test_failed_vgpu_scan_gives_no_vgpu_labels() -> None:
    snapshot = Snapshot(driver=None, machine=None, vgpu=None, gpus=())
    assert labels_of(snapshot) == {}


def test_mig_capable_and_strategy() -> None:
    not_capable = labels_of(node(gpu(0, "Tesla T4", cc=(7, 5))), "single")
    expect(not_capable, "mig.capable=false mig.strategy=single")
    capable = labels_of(node(gpu(0, mig=mig(enabled=False)), gpu(1, "Tesla T4")))
    assert capable[P + "mig.capable"] == "true"
    assert P + "mig.strategy" not in capable


def test_clique_when_all_attached_gpus_agree() -> None:
    fabric = Fabric("7b968a6d-c8aa-45e1-9e07-e1e51be99c31", 1)
    labels = labels_of(node(gpu(0, fabric=fabric), gpu(1, fabric=fabric), gpu(2)))
    assert labels[P + "gpu.clique"] == "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"


@pytest.mark.parametrize("other", [
    Fabric("7b968a6d-c8aa-45e1-9e07-e1e51be99c31", 2),
    Fabric("00000000-0000-0000-0000-000000000001", 1),
])  # fmt: skip
def test_clique_omitted_with_a_warning_when_gpus_disagree(other: Fabric) -> None:
    fabric = Fabric("7b968a6d-c8aa-45e1-9e07-e1e51be99c31", 1)
    result = build(node(gpu(0, fabric=fabric), gpu(1, fabric=other)), "none", Config(), None)
    assert P + "gpu.clique" not in result.labels
    assert any("clique" in w for w in result.warnings)


# ----------------------------------------------------------------- full GPUs


def test_full_gpu_resource_labels() -> None:
    labels = labels_of(node(gpu(0), gpu(1)))
    assert resource(labels, "gpu") == pairs(
        "compute.major=8 compute.minor=0 count=2 family=ampere memory=40960 mode=compute"
        " machine=DGXA100-920-23687-2530-000 product=NVIDIA-A100-SXM4-40GB replicas=1"
        " sharing-strategy=none"
    )


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((1, 3), "tesla"), ((2, 0), "fermi"), ((3, 7), "kepler"), ((5, 2), "maxwell"),
        ((6, 1), "pascal"), ((7, 0), "volta"), ((7, 5), "turing"), ((8, 6), "ampere"),
        ((8, 9), "ada-lovelace"), ((9, 0), "hopper"), ((10, 0), "blackwell"),
        ((12, 0), "blackwell"), ((13, 0), "rubin"), ((4, 0), "undefined"), ((11, 0), "undefined"),
    ],
)  # fmt: skip
def test_family_from_compute_capability(cc: tuple[int, int], family: str) -> None:
    assert labels_of(node(gpu(0, cc=cc)))[P + "gpu.family"] == family


def test_compute_major_zero_omits_family_and_compute() -> None:
    labels = resource(labels_of(node(gpu(0, cc=(0, 0)))), "gpu")
    assert (
        "family" not in labels and "compute.major" not in labels and "compute.minor" not in labels
    )


@pytest.mark.parametrize("memory", [None, 0])
def test_unknown_memory_omits_the_memory_label(memory: int | None) -> None:
    assert "memory" not in resource(labels_of(node(gpu(0, memory=memory))), "gpu")


@pytest.mark.parametrize(("classes", "mode"), [
    ([0x030200, 0x030200], "compute"), ([0x030000, 0x030000], "graphics"),
    ([0x030200, 0x030000], "unknown"), ([0x030200, None], "unknown"), ([0x038000], "unknown"),
])  # fmt: skip
def test_mode_from_pci_classes(classes: list[int | None], mode: str) -> None:
    gpus = [gpu(i, pci_class=c) for i, c in enumerate(classes)]
    assert labels_of(node(*gpus))[P + "gpu.mode"] == mode


# ----------------------------------------------------------------- sharing

TIME_SLICING = """
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def test_explicit_rename_is_ignored_like_upstream() -> None:
    text = TIME_SLICING + "      rename: gpu-shared\n"
    loaded = parse_config_text(text, "t.yaml")
    assert any("rename" in w for w in loaded.warnings)
    labels = labels_of(node(gpu(0)), config=loaded.config)
    assert labels[P + "gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"


def test_mps_with_a_mig_enabled_gpu_is_a_config_error() -> None:
    mps = config(TIME_SLICING.replace("timeSlicing", "mps"))
    with pytest.raises(ConfigError, match="MPS sharing is not supported for MIG devices"):
        build(node(gpu(0, mig=mig("1g.5gb"))), "mixed", mps, None)


# ----------------------------------------------------------------- MIG strategies


def test_mixed_strategy_labels_each_profile() -> None:
    snapshot = node(
        gpu(0, mig=mig("1g.5gb", "1g.5gb", "1g.5gb+me")),
        gpu(1, mig=mig("3g.20gb")),
        gpu(2, mig=mig()),  # enabled, no devices: still a GPU, no MIG resource
    )
    labels = labels_of(snapshot, "mixed")
    assert labels[P + "gpu.count"] == "3"
    assert resource(labels, "mig-1g.5gb") == pairs(
        "count=2 product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb replicas=1 sharing-strategy=none"
        " memory=4864 multiprocessors=14 slices.gi=1 slices.ci=1 engines.copy=1"
        " engines.decoder=0 engines.encoder=0 engines.jpeg=0 engines.ofa=0"
    )
    me = resource(labels, "mig-1g.5gb.me")
    assert me["product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me"
    assert me["count"] == "1" and me["engines.jpeg"] == "1"
    assert resource(labels, "mig-3g.20gb")["count"] == "1"


def test_none_strategy_ignores_mig_devices() -> None:
    labels = labels_of(node(gpu(0, mig=mig("1g.5gb"))), "none")
    assert not any(".mig-" in key or "multiprocessors" in key for key in labels)


def test_single_strategy_with_uniform_mig_overrides_gpu_labels() -> None:
    snapshot = node(gpu(0, mig=mig("1g.5gb", "1g.5gb")), gpu(1, mig=mig("1g.5gb")))
    labels = resource(labels_of(snapshot, "single"), "gpu")
    wanted = "product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb count=3 memory=4864 replicas=1"
    expect(labels, wanted + " multiprocessors=14", prefix="")
    assert labels["family"] == "ampere"  # stays from the parent
    assert labels["compute.major"] == "8"


@pytest.mark.parametrize(
    "gpus",
    [
        (gpu(0, mig=mig("1g.5gb")), gpu(1, mig=mig(enabled=False))),  # mixed enabled/disabled
        (gpu(0, mig=mig("1g.5gb")), gpu(1, mig=mig())),  # an enabled GPU without devices
        (gpu(0, mig=mig("1g.5gb")), gpu(1, mig=mig("2g.10gb"))),  # two profiles
    ],
)
def test_single_strategy_invalid_configurations(gpus: tuple) -> None:  # type: ignore[type-arg]
    result = build(node(*gpus), "single", Config(), None)
    labels = resource(result.labels, "gpu")
    expect(
        labels, "product=NVIDIA-A100-SXM4-40GB-MIG-INVALID count=0 replicas=0 memory=0", prefix=""
    )
    assert "multiprocessors" not in labels
    assert any("MIG-INVALID" in w for w in result.warnings)


def test_single_strategy_without_mig_is_like_none() -> None:
    snapshot = node(gpu(0), gpu(1))
    single = labels_of(snapshot, "single")
    none = labels_of(snapshot, "none")
    assert single.pop(P + "mig.strategy") == "single"
    assert single == none


# ----------------------------------------------------------------- resource naming

RENAMING = """
version: v1
resources:
  gpus:
  - {pattern: "A100-*-40GB", name: never-matches}
  - {pattern: "*A100*", name: a100}
  mig:
  - {pattern: "1g.*", name: mig-small}
"""


def test_patterns_name_resources_first_match_wins() -> None:
    snapshot = node(gpu(0, mig=mig("1g.5gb", "1g.5gb+me")), gpu(1, H100, cc=(9, 0), memory=81559))
    labels = labels_of(snapshot, "mixed", config(RENAMING))
    assert resource(labels, "a100")["count"] == "1"
    assert resource(labels, "gpu")["product"] == "NVIDIA-H100-80GB-HBM3"
    small = resource(labels, "mig-small")
    assert small["count"] == "2"
    # 1g.5gb and 1g.5gb+me differ in product and engines: those are omitted, not guessed
    assert "product" not in small and "engines.jpeg" not in small
    assert small["memory"] == "4864"
    assert not any(k.startswith(P + "never-matches") for k in labels)


def test_mixed_models_keep_only_common_labels_deterministically() -> None:
    a100s = [gpu(i) for i in range(4)]
    h100s = [gpu(i, H100, cc=(9, 0), memory=81559) for i in range(4, 8)]
    forward = build(node(*a100s, *h100s), "none", Config(), None)
    backward = build(node(*reversed(h100s), *reversed(a100s)), "none", Config(), None)
    assert format_labels(forward.labels) == format_labels(backward.labels)
    gpu_labels = resource(forward.labels, "gpu")
    assert gpu_labels["count"] == "8"
    for omitted in ("product", "memory", "family", "compute.major"):
        assert omitted not in gpu_labels
    assert gpu_labels["compute.minor"] == "0"  # both models agree on it
    assert gpu_labels["replicas"] == "1"


def test_seed_example_from_the_spec() -> None:
    snapshot = node(*(gpu(i, mig=mig(*["1g.5gb"] * 7)) for i in range(8)))
    labels = labels_of(snapshot, "mixed", config(RENAMING))
    assert resource(labels, "a100")["count"] == "8"
    assert resource(labels, "a100")["product"] == "NVIDIA-A100-SXM4-40GB"
    assert resource(labels, "mig-small")["count"] == "56"
    assert resource(labels, "mig-small")["memory"] == "4864"
    assert resource(labels, "gpu") == {}


# ----------------------------------------------------------------- validity


def test_overlong_value_is_cut_to_a_valid_label_with_a_warning() -> None:
    name = "NVIDIA " + "X" * 80 + " (rev 2)"
    result = build(node(gpu(0, name)), "none", Config(), None)
    value = result.labels[P + "gpu.product"]
    assert len(value) <= 63 and value[0].isalnum() and value[-1].isalnum()
    assert any("longer than 63 characters" in w for w in result.warnings)


def test_labels_are_sorted_and_formatted_as_lines() -> None:
    text = format_labels({"b": "2", "a": "1"})
    assert text == "a=1\nb=2\n"


# ----------------------------------------------------------- DGX Station display adapter

DISPLAY = "NVIDIA DGX Display"


@pytest.mark.parametrize("display_name", ["NVIDIA DGX Display", "DGX Display"])
def test_a_dgx_display_listed_in_a_snapshot_is_not_labelled(display_name: str) -> None:
    """go-nvlib (pkg/nvlib/device) skips both names before upstream labels anything."""
    a100s = [gpu(i, "NVIDIA A100-SXM4-80GB", memory=81920) for i in (0, 1, 2, 4)]
    display = gpu(3, display_name, memory=4096, cc=(7, 5), pci_class=0x030000)
    with_display = build(node(*a100s, display), "single", Config(), None)
    without = build(node(*a100s), "single", Config(), None)
    assert with_display.labels == without.labels
    assert with_display.labels[P + "gpu.count"] == "4"
    assert with_display.labels[P + "gpu.mode"] == "compute"
    assert with_display.labels[P + "gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert with_display.notes == (f"GPU 3 ({display_name}) is a display device; not labelled",)
    assert without.notes == ()
    assert with_display.warnings == ()


def test_a_node_with_only_a_display_has_no_gpu_labels() -> None:
    snapshot = node(gpu(0, DISPLAY, memory=4096, cc=(7, 5), pci_class=0x030000))
    assert build(snapshot, "none", Config(), 1700000000).labels == {
        P + "gfd.timestamp": "1700000000", P + "vgpu.present": "false",
    }  # fmt: skip


# ------------------------------------- one device type, labelled the way upstream does it
# upstream internal/lm/mig-strategy.go, newGPULabelers: per GPU name, one labeler for the
# MIG-enabled GPUs (sharing disabled) and one for the others (with sharing), each built
# from the last GPU of its group in index order, the second merged over the first


def test_a_full_gpu_speaks_over_the_mig_enabled_ones_of_its_type() -> None:
    on = gpu(0, cc=(0, 0), mig=mig("1g.5gb"))
    off = gpu(1, mig=mig(enabled=False))
    sliced = config(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 2}\n"
    )
    labels = resource(labels_of(node(on, off), "none", sliced), "gpu")
    assert labels == pairs(
        "product=NVIDIA-A100-SXM4-40GB-SHARED count=2 replicas=2 sharing-strategy=time-slicing"
        " memory=40960 machine=DGXA100-920-23687-2530-000 mode=compute family=ampere"
        " compute.major=8 compute.minor=0"
    )


def test_products_are_sanitised_part_by_part() -> None:
    """getProductName sanitises the name, "MIG" and the profile each on its own."""
    name = "NVIDIA A100 (SXM4) "
    snapshot = node(gpu(0, name, mig=mig("1g.5gb+me")))
    labels = labels_of(snapshot, "mixed")
    expect(
        labels, "gpu.product=NVIDIA-A100-SXM4 mig-1g.5gb.me.product=NVIDIA-A100-SXM4-MIG-1g.5gb.me"
    )
    invalid = labels_of(node(gpu(0, name, mig=mig()), gpu(1, name)), "single")
    assert invalid[P + "gpu.product"] == "NVIDIA-A100-SXM4-MIG-INVALID"


# ------------------------------------------------------ values that do not fit

RTX = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
RTX_1G = MigDevice("1g.24gb", 24064, 46, MigSlices(1, 1), MigEngines(1, 1, 1, 1, 0))
RTX_MODEL = "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"


def rtx(index: int) -> Gpu:
    return gpu(index, RTX, memory=97887, cc=(12, 0), mig=Mig(True, (RTX_1G,) * 4))


def test_a_long_mig_product_keeps_its_profile() -> None:
    """Upstream issue #1876: 67 characters; only the model part is shortened (PR #1880)."""
    assert len(f"{RTX_MODEL}-MIG-1g.24gb") == 67
    result = build(node(rtx(0), rtx(1)), "mixed", Config(), None)
    product = result.labels[P + "mig-1g.24gb.product"]
    assert product == "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edi-MIG-1g.24gb"
    assert len(product) == 63
    assert result.labels[P + "gpu.product"] == RTX_MODEL  # fits: byte-identical
    assert any("only the model part is shortened" in w for w in result.warnings)


def test_a_long_single_strategy_product_keeps_profile_and_shared_suffix() -> None:
    sharing = "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2}\n"
    labels = labels_of(node(rtx(0)), "single", config("version: v1\n" + sharing))
    product = labels[P + "gpu.product"]
    assert product == "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstat-MIG-1g.24gb-SHARED"
    assert len(product) <= 63


def test_a_long_invalid_product_keeps_mig_invalid() -> None:
    mixed = node(rtx(0), gpu(1, RTX, memory=97887, cc=(12, 0), mig=Mig(False)))
    product = labels_of(mixed, "single")[P + "gpu.product"]
    assert product.endswith("-MIG-INVALID") and product.startswith("NVIDIA-RTX-PRO")
    assert len(product) <= 63


def test_a_product_with_no_room_for_the_model_is_left_out() -> None:
    profile = "1g." + "9" * 60 + "gb"
    device = MigDevice(profile, 4864, 14, MigSlices(1, 1))
    labels = labels_of(node(gpu(0, mig=Mig(True, (device,)))), "mixed")
    resource_name = f"{P}mig-{profile}"
    assert not any(key.startswith(resource_name) and key.endswith(".product") for key in labels)


def test_a_number_that_does_not_fit_is_left_out_never_cut() -> None:
    """A 70-digit memory_mib is left out: cut to 63 digits it would be a wrong number."""
    huge = int("9" * 70)
    result = build(node(gpu(0, memory=huge)), "none", Config(), None)
    assert P + "gpu.memory" not in result.labels
    assert result.labels[P + "gpu.count"] == "1"  # the rest is published
    warning = next(w for w in result.warnings if "gpu.memory" in w)
    assert "left out" in warning and len(warning) < 300


def test_a_driver_version_that_does_not_fit_is_left_out() -> None:
    labels = labels_of(node(gpu(0), driver="5" * 70 + ".54.15"))
    assert P + "cuda.driver.major" not in labels and P + "cuda.driver-version.full" not in labels
    assert labels[P + "cuda.driver.minor"] == "54"


# ----------------------------------------------------------------- lost GPUs


def test_lost_gpus_are_counted_and_the_others_labelled() -> None:
    lost = (LostGpu(index=1, reason="GPU is lost"),)
    labels = labels_of(replace(node(gpu(0), gpu(2)), lost=lost))
    expect(labels, "gpu.lost=1 gpu.count=2")
    assert P + "gpu.lost" not in labels_of(node(gpu(0), gpu(2)))  # only when non-zero


def test_every_gpu_lost() -> None:
    lost = tuple(LostGpu(index=i) for i in range(2))
    labels = labels_of(replace(node(), lost=lost))
    assert labels == {P + "gpu.lost": "2", P + "vgpu.present": "false"}


# ------------------------------------------------- small nodes, one table of what they show

RENAME_BY_DEFAULT = TIME_SLICING.replace(
    "timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n"
)
MPS = TIME_SLICING.replace("timeSlicing", "mps")
ANCHORED = (
    'version: v1\nresources:\n  gpus:\n  - {pattern: "a100*", name: lower}\n'
    '  - {pattern: "A100", name: exact}\n'
)
RENAMED_SHARED = (
    RENAMING + "sharing:\n  timeSlicing:\n    resources:\n    - {name: a100, replicas: 2}\n"
)
VGPUS = Vgpu((VgpuDevice("460.16", "r460_00"), VgpuDevice("550.54.16", "r550_40")))
DISPLAYED = [gpu(i, mig=mig("1g.5gb", "1g.5gb")) for i in range(4)]
MIG_ON_OFF = (gpu(0, memory=40960, mig=mig("1g.5gb")), gpu(1, memory=None, mig=mig(enabled=False)))
#: (id, node, MIG strategy, config text, what the labels must hold: "key=value ..." without
#: the prefix)
SMALL_NODES = table([
    ("driver-and-cuda-split", node(gpu(0), driver="550.54.15", cuda=12040), "none", None,
     "cuda.driver.major=550 cuda.driver.minor=54 cuda.driver.rev=15"
     " cuda.driver-version.revision=15 cuda.driver-version.full=550.54.15"
     " cuda.runtime.major=12 cuda.runtime.minor=4 cuda.runtime-version.full=12.4"),
    ("two-part-driver-empty-revision", node(gpu(0), driver="470.82", cuda=11040), "none", None,
     "cuda.driver.rev= cuda.driver-version.revision= cuda.driver-version.full=470.82"),
    ("vgpu-from-the-last-device", node(gpu(0), vgpu=VGPUS), "none", None,
     "vgpu.present=true vgpu.host-driver-version=550.54.16 vgpu.host-driver-branch=r550_40"),
    ("machine-sanitised", node(gpu(0), machine=" Standard PC (Q35 + ICH9, 2009) "), "none", None,
     "gpu.machine=Standard-PC-Q35-ICH9-2009"),
    ("machine-unknown-when-missing", node(gpu(0), machine=None), "none", None,
     "gpu.machine=unknown"),
    ("product-sanitised", node(gpu(0, "NVIDIA TITAN X (Pascal)", cc=(6, 1))), "none", None,
     "gpu.product=NVIDIA-TITAN-X-Pascal"),
    ("empty-product-name", node(gpu(0, "")), "none", None, "gpu.product="),
    ("product-name-sanitised-to-nothing", node(gpu(0, "(((")), "none", None, "gpu.product="),
    ("mig-products-that-fit-unchanged", node(gpu(0, mig=mig("1g.5gb", "1g.5gb+me"))), "mixed",
     None, "mig-1g.5gb.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
     " mig-1g.5gb.me.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me"),
    ("mig-enabled-model-zero-replicas-under-none",
     node(gpu(0, mig=mig("1g.5gb")), gpu(1, mig=mig("1g.5gb"))), "none", None,
     "gpu.replicas=0 gpu.count=2 gpu.sharing-strategy=none"),
    ("partly-mig-enabled-model-keeps-replicas",
     node(gpu(0, mig=mig("1g.5gb")), gpu(1, mig=mig(enabled=False))), "none", None,
     "gpu.replicas=1"),
    ("time-slicing-marks-product-shared", node(gpu(0)), "none", TIME_SLICING,
     "gpu.product=NVIDIA-A100-SXM4-40GB-SHARED gpu.replicas=4 gpu.sharing-strategy=time-slicing"
     " mps.capable=false"),
    ("rename-by-default-drops-shared", node(gpu(0)), "none", RENAME_BY_DEFAULT,
     "gpu.product=NVIDIA-A100-SXM4-40GB gpu.replicas=4"),
    ("mps-capable-and-strategy", node(gpu(0)), "none", MPS,
     "mps.capable=true gpu.sharing-strategy=mps"),
    ("sharing-of-a-mig-enabled-model-not-applied", node(gpu(0, mig=mig("1g.5gb"))), "mixed",
     TIME_SLICING, "gpu.replicas=0 gpu.product=NVIDIA-A100-SXM4-40GB gpu.sharing-strategy=none"),
    # "a100*" is case-sensitive and "A100" anchored: neither matches the A100's name
    ("patterns-anchored-and-case-sensitive", node(gpu(0)), "none", ANCHORED, "gpu.count=1"),
    ("sharing-of-a-renamed-resource", node(gpu(0)), "none", RENAMED_SHARED,
     "a100.replicas=2 a100.product=NVIDIA-A100-SXM4-40GB-SHARED"),
    # only the exact names are skipped (go-nvlib looks the name up in a set)
    ("display-skip-is-an-exact-match",
     node(gpu(0), gpu(1, "NVIDIA DGX Display ", memory=4096, pci_class=0x030000)), "none", None,
     "gpu.count=2"),
    # counted, the display (never MIG-enabled) would make the layout INVALID
    ("mig-beside-a-display-valid-single",
     node(*DISPLAYED, gpu(4, DISPLAY, memory=4096, cc=(7, 5), pci_class=0x030000)), "single", None,
     "gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb gpu.count=8"),
    # MPS beside a MIG-enabled display: no MIG error from the display
    ("mps-with-mig-ignores-the-display",
     node(gpu(0), gpu(1, DISPLAY, memory=4096, mig=mig(enabled=True))), "none", MPS,
     "mps.capable=true gpu.count=1"),
    # upstream's newGPULabelers: the last GPU of a type speaks for it...
    ("last-gpu-of-a-type-speaks",
     node(gpu(0, memory=40960), gpu(1, memory=40000), gpu(2, memory=40537)), "none", None,
     "gpu.memory=40537 gpu.count=3"),
    # ...and merges label maps: a key only the MIG-enabled group's labeler has stays
    ("full-gpu-lacks-kept-from-mig-enabled", node(*MIG_ON_OFF), "none", None,
     "gpu.memory=40960 gpu.replicas=1"),
])  # fmt: skip


@pytest.mark.parametrize(("snapshot", "strategy", "text", "wanted"), SMALL_NODES)
def test_small_node_labels(
    snapshot: Snapshot, strategy: str, text: str | None, wanted: str
) -> None:
    expect(labels_of(snapshot, strategy, config(text) if text else None), wanted)
