"""Property tests for the labelling engine and the snapshot format (hypothesis).

The checks are written against SPEC §3 and §5 without using the engine's helpers: the
label grammar, sanitising, wildcard matching and the common-label rule are all re-stated
here, so a mistake in the engine cannot hide behind the same mistake in the test."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gfd import snapshot as snapshot_format
from gfd.config import Config, ReplicatedResource, ResourcePattern, Sharing
from gfd.errors import ConfigError, LabelError
from gfd.labels import build
from gfd.outputs.file import format_labels
from gfd.settings import parse_config_text
from gfd.snapshot import Driver, Gpu, Mig, MigDevice, Snapshot
from tests import helpers
from tests.helpers import RESOURCE_SUFFIXES, labels_of
from tests.strategies import config_documents, configs, mig_strategies, snapshots

PROPERTY = settings(
    max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip

PREFIX = "nvidia.com/"

# --------------------------------------------------------------------- SPEC, restated

# §5.4: a name is 1-63 characters of ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]; a value is
# empty or such a name.
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)


def valid_key(key: str) -> bool:
    if not key.startswith(PREFIX):
        return False
    name = key[len(PREFIX) :]
    return 1 <= len(name) <= 63 and _NAME.fullmatch(name) is not None


def valid_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and _NAME.fullmatch(value) is not None)


def publishable(value: str) -> str | None:
    """§5.4: an invalid value is cut to 63 characters and trimmed back to alphanumeric
    ends.  None when the SPEC leaves the result open (characters inside the value that are
    not allowed anywhere: only raw vGPU strings can have those)."""
    if valid_value(value):
        return value
    cut = value[:63].strip("".join({c for c in value if c not in _ALNUM}))
    return cut if valid_value(cut) else None


OMITTED = object()


def published_value(name: str, value: str) -> str | object | None:
    """§5.4, never cutting a number: a value built from a name (``*.product``, ``*.machine``) is
    made publishable (:func:`publishable`); any other value (a number, a version...) is
    published as it is when valid and left out (OMITTED) when not — never cut."""
    if name.endswith((".product", ".machine")):
        return publishable(value)
    return value if valid_value(value) else OMITTED


_SANITIZE_KEEP = set(_ALNUM + "-_. ")


def sanitize(text: str) -> str:
    """§5.5: delete characters outside [A-Za-z0-9-_. ], join the words with '-'."""
    kept = "".join(c for c in text if c in _SANITIZE_KEEP)
    return "-".join(word for word in kept.split(" ") if word)


def wildcard_match(pattern: str, text: str) -> bool:
    """§5.3: '*' matches any run of characters, nothing else is special, anchored."""
    first, *rest = pattern.split("*")
    if not rest:
        return text == pattern
    *middle, last = rest
    if not text.startswith(first):
        return False
    position = len(first)
    for part in middle:
        found = text.find(part, position)
        if found < 0:
            return False
        position = found + len(part)
    return len(text) - position >= len(last) and text.endswith(last)


def name_for(text: str, patterns: Sequence[ResourcePattern], default: str) -> str:
    for rule in patterns:
        if wildcard_match(rule.pattern, text):
            return rule.name
    return default


def default_mig_name(profile: str) -> str:
    return "mig-" + profile.replace("+", ".")


def family(major: int, minor: int) -> str:
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}
    names.update({10: "blackwell", 12: "blackwell", 13: "rubin"})
    return names.get(major, "undefined")


SINGLE_OVERRIDES = set(RESOURCE_SUFFIXES) - {"machine", "mode", "family"}
SINGLE_OVERRIDES -= {"compute.major", "compute.minor"}


def replicas_for(resource: str, sharing: Sharing) -> tuple[int, bool]:
    """(configured replicas, renamed) of ``nvidia.com/<resource>``."""
    for entry in sharing.resources:
        if entry.name == PREFIX + resource:
            return entry.replicas, entry.renamed
    return 1, False


def product(parts: Sequence[str], shared: bool) -> str | None:
    """§5.2, qualifiers kept whole: each non-empty part sanitised, SHARED appended, joined
    with '-'; past 63 characters only the model (first part) is cut, to what the rest
    leaves, and trimmed to an alphanumeric end; None (label left out) when nothing of it is
    left."""
    kept = [sanitize(part) for part in parts if part]
    if not kept:
        return ""
    if shared:
        kept.append("SHARED")
    if len("-".join(kept)) <= 63:
        return "-".join(kept)
    model, tail = kept[0], kept[1:]
    room = 63 - len("-".join(tail)) - 1 if tail else 63
    cut = model[: max(room, 0)]
    while cut and cut[-1] not in _ALNUM:
        cut = cut[:-1]
    return "-".join([cut, *tail]) if cut else None


def sharing_part(
    resource: str, sharing: Sharing, parts: Sequence[str], replicas: int
) -> dict[str, str]:
    _, renamed = replicas_for(resource, sharing)
    shared = replicas > 1
    labels = {"replicas": str(replicas), "sharing-strategy": sharing.strategy if shared else "none"}
    value = product(parts, shared and not renamed)
    if value is not None:
        labels["product"] = value
    return labels


def gpu_type_labels(
    resource: str, gpu: Gpu, sharing: Sharing, replicas: int, machine: str | None, mode: str
) -> dict[str, str]:
    """Labels of one full-GPU device type (§5.2), before combining."""
    labels = sharing_part(resource, sharing, (gpu.name,), replicas)
    if gpu.memory_mib:
        labels["memory"] = str(gpu.memory_mib)
    cc = gpu.compute_capability
    if cc.major != 0:
        labels["family"] = family(cc.major, cc.minor)
        labels["compute.major"] = str(cc.major)
        labels["compute.minor"] = str(cc.minor)
    labels["machine"] = "unknown" if machine is None else sanitize(machine)
    labels["mode"] = mode
    return labels


def mig_type_labels(resource: str, parent: Gpu, device: MigDevice, sharing: Sharing) -> dict:
    """Labels of one MIG device type (parent name + profile, §5.2), before combining."""
    replicas, _ = replicas_for(resource, sharing)
    parts = (parent.name, "MIG", device.profile.replace("+", "."))
    labels = sharing_part(resource, sharing, parts, replicas)
    labels["memory"] = str(device.memory_mib)
    labels["multiprocessors"] = str(device.multiprocessors)
    labels["slices.gi"], labels["slices.ci"] = str(device.slices.gi), str(device.slices.ci)
    for engine in ("copy", "decoder", "encoder", "jpeg", "ofa"):
        labels[f"engines.{engine}"] = str(getattr(device.engines, engine))
    return labels


def mode_of(gpus: Iterable[Gpu]) -> str:
    classes = {gpu.pci_class for gpu in gpus}
    if classes == {0x030200}:
        return "compute"
    if classes == {0x030000}:
        return "graphics"
    return "unknown"


def common(per_device: list[dict[str, str]]) -> dict[str, str]:
    """§5.3: count is the sum, every other key only where all devices agree."""
    keys = set(per_device[0]).intersection(*per_device[1:])
    result = {
        k: per_device[0][k] for k in keys if all(d[k] == per_device[0][k] for d in per_device)
    }
    result["count"] = str(len(per_device))
    return result


def full_gpu_resources(gpus: Sequence[Gpu], config: Config, machine: str | None) -> dict:
    """resource -> list of per-device label dicts for the full GPUs."""
    members: dict[str, list[Gpu]] = defaultdict(list)
    for gpu in gpus:
        members[name_for(gpu.name, config.gpu_patterns, "gpu")].append(gpu)
    result: dict[str, list[dict[str, str]]] = {}
    for resource, group in members.items():
        mode = mode_of(group)
        per_device = []
        for gpu in group:
            same_type = [g for g in group if g.name == gpu.name]
            if all(g.mig is not None and g.mig.enabled for g in same_type):
                replicas = 0
            else:
                replicas, _ = replicas_for(resource, config.sharing)
            per_device.append(
                gpu_type_labels(resource, gpu, config.sharing, replicas, machine, mode)
            )
        result[resource] = per_device
    return result


def mig_resources(gpus: Sequence[Gpu], config: Config, default: str | None) -> dict:
    result: dict[str, list[dict[str, str]]] = defaultdict(list)
    for gpu in gpus:
        if gpu.mig is None or not gpu.mig.enabled:
            continue
        for device in gpu.mig.devices:
            fallback = default or default_mig_name(device.profile)
            resource = name_for(device.profile, config.mig_patterns, fallback)
            result[resource].append(mig_type_labels(resource, gpu, device, config.sharing))
    return result


def single_problem(gpus: Sequence[Gpu]) -> bool:
    if not all(gpu.mig is not None and gpu.mig.enabled for gpu in gpus):
        return True
    if any(gpu.mig is not None and not gpu.mig.devices for gpu in gpus):
        return True
    return len({d.profile for gpu in gpus if gpu.mig for d in gpu.mig.devices}) != 1


def model_resource_labels(
    gpus: Sequence[Gpu], strategy: str, config: Config, machine: str | None
) -> dict[str, dict[str, str]]:
    devices = full_gpu_resources(gpus, config, machine)
    if strategy == "mixed":
        for resource, items in mig_resources(gpus, config, None).items():
            devices.setdefault(resource, []).extend(items)
    resources = {name: common(items) for name, items in devices.items()}
    enabled = [gpu for gpu in gpus if gpu.mig is not None and gpu.mig.enabled]
    if strategy != "single" or not enabled:
        return resources
    if single_problem(gpus):
        first = min(enabled, key=lambda gpu: gpu.index)
        target = name_for(first.name, config.gpu_patterns, "gpu")
        # SPEC §5.2 (single): the INVALID set, sharing-strategy empty whatever the sharing
        resources[target].update({"count": "0", "replicas": "0", "memory": "0"})
        resources[target]["sharing-strategy"] = ""
        invalid = product((first.name, "MIG", "INVALID"), False)
        resources[target].pop("product", None)
        if invalid is not None:
            resources[target]["product"] = invalid
        return resources
    for resource, items in mig_resources(gpus, config, "gpu").items():
        base = {k: v for k, v in resources.get(resource, {}).items() if k not in SINGLE_OVERRIDES}
        base.update(common(items))
        resources[resource] = base
    return resources


def model_labels(
    snap: Snapshot, strategy: str, config: Config, timestamp: int | None
) -> dict[str, str | None]:
    """The whole label set SPEC §5 asks for (None: value left open by the SPEC)."""
    labels: dict[str, str] = {}
    if timestamp is not None:
        labels["gfd.timestamp"] = str(timestamp)
    if snap.vgpu is not None:
        labels["vgpu.present"] = "true" if snap.vgpu.devices else "false"
        if snap.vgpu.devices:
            labels["vgpu.host-driver-version"] = snap.vgpu.devices[-1].host_driver_version
            labels["vgpu.host-driver-branch"] = snap.vgpu.devices[-1].host_driver_branch
    if snap.gpus:
        assert snap.driver is not None
        parts = snap.driver.version.split(".")
        major, minor, rev = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
        cuda_major, cuda_minor = str(snap.driver.cuda // 1000), str(snap.driver.cuda % 1000 // 10)
        labels.update(
            {
                "cuda.driver.major": major, "cuda.driver.minor": minor, "cuda.driver.rev": rev,
                "cuda.driver-version.major": major, "cuda.driver-version.minor": minor,
                "cuda.driver-version.revision": rev,
                "cuda.driver-version.full": snap.driver.version, "cuda.runtime.major": cuda_major,
                "cuda.runtime.minor": cuda_minor, "cuda.runtime-version.major": cuda_major,
                "cuda.runtime-version.minor": cuda_minor,
                "cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
                "mig.capable": "true" if any(g.mig is not None for g in snap.gpus) else "false",
                "mps.capable": "true" if config.sharing.strategy == "mps" else "false",
            }
        )  # fmt: skip
        if strategy != "none":
            labels["mig.strategy"] = strategy
        cliques = {f"{g.fabric.cluster_uuid}.{g.fabric.clique_id}" for g in snap.gpus if g.fabric}
        if len(cliques) == 1:
            labels["gpu.clique"] = cliques.pop()
        for resource, values in model_resource_labels(
            snap.gpus, strategy, config, snap.machine
        ).items():
            for suffix, value in values.items():
                labels[f"{resource}.{suffix}"] = value
    return {
        PREFIX + name: expected for name, value in labels.items()
        if (expected := published_value(name, value)) is not OMITTED
    }  # fmt: skip


# ---------------------------------------------------------------------------- helpers


def mig_enabled(snap: Snapshot) -> bool:
    return any(gpu.mig is not None and gpu.mig.enabled for gpu in snap.gpus)


def buildable(snap: Snapshot, config: Config) -> bool:
    """False only for the documented ConfigError: MPS sharing with a MIG-enabled GPU."""
    return not (config.sharing.strategy == "mps" and snap.gpus and mig_enabled(snap))


def resource_devices(
    snap: Snapshot, strategy: str, config: Config
) -> dict[str, list[tuple[str, ...]]]:
    """resource -> the device type of every device named into it (none/mixed)."""
    result: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for gpu in snap.gpus:
        result[name_for(gpu.name, config.gpu_patterns, "gpu")].append(("gpu", gpu.name))
        if strategy == "mixed" and gpu.mig is not None and gpu.mig.enabled:
            for device in gpu.mig.devices:
                resource = name_for(
                    device.profile, config.mig_patterns, default_mig_name(device.profile)
                )
                result[resource].append(("mig", gpu.name, device.profile))
    return result


def resource_part(labels: dict[str, str], resource: str) -> dict[str, str]:
    """The <resource>.<suffix> labels (no suffix is a dotted tail of another, so this
    cannot pick up a label of a resource whose name extends this one)."""
    return {
        suffix: labels[key] for suffix in RESOURCE_SUFFIXES
        if (key := f"{PREFIX}{resource}.{suffix}") in labels
    }  # fmt: skip


timestamps = st.none() | st.integers(min_value=0, max_value=2**40)

# ------------------------------------------------------------------------- properties


@PROPERTY
@given(snapshots(), configs(), mig_strategies, timestamps)
def test_every_key_and_value_is_a_valid_label(snap, config, strategy, ts):
    assume(buildable(snap, config))
    result = build(snap, strategy, config, ts)
    for key, value in result.labels.items():
        assert valid_key(key), key
        assert isinstance(value, str)
        assert valid_value(value), (key, value)
    text = format_labels(result.labels)
    assert text == "".join(f"{k}={result.labels[k]}\n" for k in sorted(result.labels))


@PROPERTY
@given(snapshots(), configs(), mig_strategies, st.randoms(use_true_random=False))
def test_output_is_deterministic_and_independent_of_device_order(snap, config, strategy, rnd):
    assume(buildable(snap, config))
    first = format_labels(labels_of(snap, strategy, config))
    assert format_labels(labels_of(snap, strategy, config)) == first

    gpus = []
    for gpu in snap.gpus:
        if gpu.mig is not None:
            devices = list(gpu.mig.devices)
            rnd.shuffle(devices)
            gpu = replace(gpu, mig=Mig(gpu.mig.enabled, tuple(devices)))
        gpus.append(gpu)
    rnd.shuffle(gpus)
    shuffled = replace(snap, gpus=tuple(gpus))
    assert format_labels(labels_of(shuffled, strategy, config)) == first


@PROPERTY
@given(snapshots(), configs(), st.sampled_from(["none", "mixed"]))
def test_count_is_the_number_of_devices_named_into_the_resource(snap, config, strategy):
    assume(buildable(snap, config))
    labels = labels_of(snap, strategy, config)
    counts: Counter[str] = Counter()
    for gpu in snap.gpus:
        counts[name_for(gpu.name, config.gpu_patterns, "gpu")] += 1
        if strategy == "mixed" and gpu.mig is not None and gpu.mig.enabled:
            for device in gpu.mig.devices:
                fallback = default_mig_name(device.profile)
                counts[name_for(device.profile, config.mig_patterns, fallback)] += 1
    expected = {f"{PREFIX}{resource}.count": str(n) for resource, n in counts.items()}
    published = {key: value for key, value in labels.items() if key.endswith(".count")}
    assert published == expected


@PROPERTY
@given(snapshots(), configs(), st.sampled_from(["none", "mixed"]))
def test_single_type_resource_has_exactly_the_per_type_labels(snap, config, strategy):
    """A resource holding one device type has that type's labels (§5.2) plus its count."""
    assume(buildable(snap, config))
    labels = labels_of(snap, strategy, config)
    for resource, types in resource_devices(snap, strategy, config).items():
        if len(set(types)) != 1:
            continue
        kind, parent_name, *profile = types[0]
        if kind == "gpu":
            members = [g for g in snap.gpus if g.name == parent_name]
            if all(g.mig is not None and g.mig.enabled for g in members):
                replicas = 0
            else:
                replicas, _ = replicas_for(resource, config.sharing)
            expected = gpu_type_labels(
                resource, members[0], config.sharing, replicas, snap.machine, mode_of(members)
            )
        else:
            parent = next(g for g in snap.gpus if g.name == parent_name)
            device = next(
                d
                for g in snap.gpus
                if g.name == parent_name and g.mig is not None
                for d in g.mig.devices
                if d.profile == profile[0]
            )
            expected = mig_type_labels(resource, parent, device, config.sharing)
        expected["count"] = str(len(types))
        expected = {
            k: e for k, v in expected.items() if (e := published_value("." + k, v)) is not OMITTED
        }
        assert resource_part(labels, resource) == expected, resource


@PROPERTY
@given(snapshots(), configs(), st.sampled_from(["none", "mixed"]))
def test_single_type_resource_equals_a_node_of_only_that_type(snap, config, strategy):
    """Metamorphic form of the same property: the resource's labels do not change when the
    node holds nothing but the devices of that type."""
    assume(buildable(snap, config))
    labels = labels_of(snap, strategy, config)
    for resource, types in resource_devices(snap, strategy, config).items():
        if len(set(types)) != 1:
            continue
        kind, parent_name, *profile = types[0]
        only: list[Gpu] = []
        for gpu in snap.gpus:
            if gpu.name != parent_name:
                continue
            if kind == "mig":
                assert gpu.mig is not None
                if not gpu.mig.enabled:
                    continue
                kept = tuple(d for d in gpu.mig.devices if d.profile == profile[0])
                if not kept:
                    continue
                gpu = replace(gpu, mig=Mig(True, kept))
            only.append(gpu)
        alone = labels_of(replace(snap, gpus=tuple(only)), strategy, config)
        assert resource_part(alone, resource) == resource_part(labels, resource), resource


@PROPERTY
@given(snapshots(), configs(), mig_strategies, timestamps)
def test_labels_match_the_spec_model(snap, config, strategy, ts):
    """The whole label set equals an independent model of SPEC §5 (for every strategy)."""
    assume(buildable(snap, config))
    labels = labels_of(snap, strategy, config, ts)
    expected = model_labels(snap, strategy, config, ts)
    assert set(labels) == set(expected)
    for key, value in expected.items():
        if value is not None:
            assert labels[key] == value, key


@pytest.mark.parametrize("sharing", ["none", "time-slicing", "time-slicing renamed"])
def test_single_invalid_set_has_an_empty_sharing_strategy(sharing: str) -> None:
    """SPEC §5.2 (single): the INVALID set has `gpu.sharing-strategy=` (empty) whatever the
    sharing configuration; so does upstream (internal/lm/mig-strategy.go,
    newInvalidMigStrategyLabeler, and mig-strategy_test.go's invalid cases)."""
    snap = helpers.node(helpers.gpu(0, mig=helpers.mig("1g.5gb")), helpers.gpu(1), machine=None)
    config = Config()
    if sharing != "none":
        renamed = sharing.endswith("renamed")
        entry = ReplicatedResource("nvidia.com/gpu", 4, renamed)
        config = Config(sharing=Sharing("time-slicing", (entry,)))
    labels = build(snap, "single", config, None).labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert labels["nvidia.com/gpu.sharing-strategy"] == ""
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/gpu.count"] == "0"
    assert labels["nvidia.com/gpu.memory"] == "0"


_odd_drivers = st.text(st.characters(exclude_categories=("Cs",)), max_size=12) | st.from_regex(
    r"[0-9a-z]{1,4}(\.[0-9a-z]{0,4}){0,3}", fullmatch=True
)


@PROPERTY
@given(snapshots(), configs(), mig_strategies, _odd_drivers)
def test_engine_raises_only_label_and_config_errors(snap, config, strategy, version):
    """Valid snapshots (and odd driver versions) never crash the engine: the only errors
    are LabelError for a driver version that is not X.Y / X.Y.Z and ConfigError for MPS
    with MIG."""
    if snap.driver is not None:
        snap = replace(snap, driver=Driver(version, snap.driver.cuda))
    digits_version = re.fullmatch(r"[0-9]+(\.[0-9]+){1,2}", version) is not None
    alnum_version = re.fullmatch(r"[A-Za-z0-9]+(\.[A-Za-z0-9]+){1,2}", version) is not None
    try:
        result = build(snap, strategy, config, None)
    except ConfigError:
        assert not buildable(snap, config)
    except LabelError:
        assert snap.gpus and not digits_version
    else:
        assert buildable(snap, config)
        assert not snap.gpus or alnum_version
        assert all(valid_key(k) and valid_value(v) for k, v in result.labels.items())


@PROPERTY
@given(snapshots())
def test_snapshot_round_trips_through_yaml(snap):
    assert snapshot_format.from_dict(snapshot_format.to_dict(snap)) == snap
    assert snapshot_format.loads(snapshot_format.dumps(snap)) == snap


def test_yaml_snapshot_round_trips_a_lone_next_line_character():
    # a lone U+0085 (NEL) written raw in a quoted scalar reads back as a space
    snap = Snapshot(machine="\x85")
    assert snapshot_format.loads(snapshot_format.dumps(snap)) == snap


@PROPERTY
@given(snapshots())
def test_snapshot_round_trips_through_json(snap):
    assert snapshot_format.loads(snapshot_format.dumps_json(snap)) == snap
    assert snapshot_format.from_dict(json.loads(snapshot_format.dumps_json(snap))) == snap


def test_json_snapshot_round_trips_characters_outside_the_bmp():
    snap = Snapshot(
        driver=Driver("550.54.15", 12040), machine="rack \U0001f680 7",
        gpus=(Gpu(index=0, uuid="GPU-0", name="NVIDIA \U00010000"),),
    )  # fmt: skip
    assert snapshot_format.loads(snapshot_format.dumps_json(snap)) == snap


@PROPERTY
@given(config_documents())
def test_generated_config_documents_load_as_generated(document):
    text, expected = document
    loaded = parse_config_text(text, "<generated>")
    assert loaded.config == expected
    assert loaded.warnings == ()


@PROPERTY
@given(
    snapshots(max_gpus=6),
    configs(),
    mig_strategies,
    st.sampled_from(["NVIDIA DGX Display", "DGX Display"]),
    st.integers(min_value=64, max_value=80),
    st.booleans(),
)
def test_a_dgx_display_anywhere_changes_no_label(snap, config, strategy, name, index, mig_on):
    """go-nvlib skips the DGX Station's display adapter before upstream labels anything:
    adding one to any node (at any index, whatever it reports) leaves the labels as they
    were and only adds a note."""
    assume(buildable(snap, config))
    display = Gpu(
        index=index, uuid=f"GPU-display-{index}", name=name, pci_bus_id="0000:c1:00.0",
        pci_class=0x030000, memory_mib=4096,
        compute_capability=snapshot_format.ComputeCapability(7, 5),
        mig=Mig(mig_on, ()) if mig_on else None,
    )  # fmt: skip
    with_display = replace(snap, gpus=(*snap.gpus, display))
    before = build(snap, strategy, config, None)
    after = build(with_display, strategy, config, None)
    assert after.labels == before.labels
    assert after.warnings == before.warnings
    assert len(after.notes) == len(before.notes) + 1
