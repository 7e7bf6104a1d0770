"""Hypothesis strategies for gfd's pure core: valid v1 snapshots and label configs.

``snapshots()`` draws nodes that the snapshot loader accepts (SPEC §3): realistic GPU
models mixed with odd names, MIG layouts from a realistic profile table (including the
``+me`` style suffixes), fabric cliques that agree or disagree, vGPU scans that failed,
found nothing or found devices.  A GPU model (its name) fixes memory, compute capability
and MIG capability, and a MIG profile fixes its attributes, so a "device type" (SPEC §5.3)
always has one set of per-type labels; what varies per GPU is what varies on real nodes:
PCI class, MIG mode and layout, fabric.

``configs()`` draws :class:`gfd.config.Config` values directly (pattern lists and a
sharing section); ``config_documents()`` draws config-file text together with the Config
the loader must make of it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import yaml
from hypothesis import strategies as st

from gfd.config import Config, ReplicatedResource, ResourcePattern, Sharing, wildcard_regex
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
    VgpuDevice,
)

__all__ = [
    "GPU_NAMES", "MIG_PROFILES", "config_documents", "configs", "mig_strategies",
    "resource_names", "snapshots",
]  # fmt: skip

# ----------------------------------------------------------------------------- tables

GPU_NAMES = (
    "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A30",
    "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA GB200", "NVIDIA B200",
    "NVIDIA L40S", "NVIDIA RTX A6000", "NVIDIA GeForce RTX 4090", "NVIDIA TITAN X (Pascal)",
    "Tesla V100-SXM2-16GB", "Tesla T4", "Quadro RTX 6000", "GRID A100X-4C",
    # odd ones: parentheses, runs of spaces, edges that are not alphanumeric, non-ASCII,
    # characters that sanitising deletes, nothing left after sanitising, very long
    "  NVIDIA   spaced  (out)  ", "(((parens)))", "-dash-first_", ".dot.first.", "NVIDIA Ä/Ö GPU",
    "tab\tand\nnewline", "*star*", "", "NVIDIA " + "VeryLongProductName-" * 5, "x" * 70,
)  # fmt: skip

#: profile -> (memory_mib, multiprocessors, (gi, ci), (copy, decoder, encoder, jpeg, ofa))
MIG_PROFILES: dict[str, tuple[int, int, tuple[int, int], tuple[int, int, int, int, int]]] = {
    "1g.5gb": (4864, 14, (1, 1), (1, 0, 0, 0, 0)),
    "1g.5gb+me": (4864, 14, (1, 1), (1, 1, 0, 1, 1)),
    "1g.10gb": (9856, 14, (1, 1), (1, 1, 0, 0, 0)),
    "2g.10gb": (9856, 28, (2, 2), (2, 1, 0, 0, 0)),
    "3g.20gb": (19968, 42, (3, 3), (3, 2, 0, 0, 0)),
    "4g.20gb": (19968, 56, (4, 4), (4, 2, 0, 0, 0)),
    "7g.40gb": (40192, 98, (7, 7), (7, 5, 0, 1, 1)),
    "1c.3g.20gb": (19968, 14, (3, 1), (3, 2, 0, 0, 0)),
    "2c.3g.20gb": (19968, 28, (3, 2), (3, 2, 0, 0, 0)),
    "1g.6gb": (5836, 14, (1, 1), (1, 1, 0, 0, 0)),
    "1g.10gb+me": (9984, 16, (1, 1), (1, 1, 0, 1, 1)),
    "1g.12gb-me": (11008, 16, (1, 1), (1, 0, 0, 0, 0)),
    "1g.20gb": (19968, 26, (1, 1), (1, 1, 0, 1, 0)),
    "1g.24gb+gfx": (23552, 26, (1, 1), (1, 1, 0, 1, 0)),
    "1g.23gb+me.all": (23552, 16, (1, 1), (1, 7, 0, 7, 1)),
    "3g.40gb": (40448, 60, (3, 3), (3, 3, 0, 3, 0)),
    "7g.80gb": (81408, 132, (7, 7), (7, 7, 0, 7, 1)),
}

PCI_CLASSES = (0x030200, 0x030000, None, 0x038000, 0x030201, 0)

CLUSTER_UUIDS = ("7b968a6d-c8aa-45e1-9e07-e1e51be99c31", "0c0ffee0-1111-4222-8333-944455556666")

VGPU_DEVICES = (("460.16", "r460_00"), ("535.129.03", "r535_00"), ("550.54.15", "r550_40"))

MACHINES = (
    "DGXA100 920-23687-2530-000", "ProLiant XL675d Gen10 Plus", "PowerEdge (R750xa)",
    "  padded   machine  ", "line\x85break\u2028sep", "", "...", "NVIDIA DGX H100 " + "Z" * 60,
)  # fmt: skip

# -------------------------------------------------------------------------- snapshots

_odd_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)),  # no lone surrogates
    max_size=40,
)

#: the letters of index strings (below): one per index, in order, so that Hypothesis, which
#: shrinks a string toward shorter and toward its alphabet's first letters, shrinks the
#: indices toward fewer and lower
_INDEX_LETTERS = "".join(chr(0x30 + i) for i in range(64))


@functools.cache
def index_strings(
    count: int, min_size: int = 0, max_size: int | None = None
) -> st.SearchStrategy[str]:
    """Strings over the first ``count`` (1-64) index letters (decoded by ``draw_indices``)."""
    return st.text(alphabet=_INDEX_LETTERS[:count], min_size=min_size, max_size=max_size)


def draw_indices(
    draw: st.DrawFn, count: int, min_size: int = 0, max_size: int | None = None
) -> list[int]:
    """A list of indices below ``count`` (1-64), drawn as one string over a ``count``-letter
    alphabet.  Hypothesis draws a string as one choice, where a list of integers costs two
    choices an element and a span each: the snapshots and configs below draw most of their
    decisions this way, which makes them about twice as cheap to generate (and the suite's
    time is mostly generation).  Decoded here rather than with ``.map``, whose every draw
    costs more than the string's."""
    return indices(draw(index_strings(count, min_size, max_size)))


def indices(text: str) -> list[int]:
    """The indices an index string (index_strings) stands for."""
    return [ord(letter) - 0x30 for letter in text]


_DIGITS = "0123456789"
#: a version's decimal part: 1-4 digits, leading zeros included ("07", "015")
_version_part = st.text(alphabet=_DIGITS, min_size=1, max_size=4)
_driver_versions = st.one_of(
    st.tuples(_version_part, _version_part),  # X.Y
    st.tuples(_version_part, _version_part, _version_part),  # X.Y.Z
).map(".".join)


cuda_versions = st.sampled_from([11000, 11080, 12000, 12020, 12040, 12080, 13000]) | st.integers(
    min_value=0, max_value=99999
)

#: real (major, minor) pairs, the family boundaries (7.4/7.5, 8.8/8.9), major 0 (unknown)
_REAL_CCS = ((0, 0), (3, 7), (5, 2), (6, 0), (6, 1), (7, 0), (7, 2), (7, 4), (7, 5), (8, 0))
_REAL_CCS += ((8, 6), (8, 7), (8, 8), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0), (13, 0))
_MEMORIES = (None, 0, 16384, 40960, 81559, 97871)


@dataclass(frozen=True)
class _Model:
    name: str
    memory_mib: int | None
    compute_capability: ComputeCapability
    mig_capable: bool


_any_memory = st.integers(0, 300_000)
#: any capability, or upstream's unknown (-1.-1, a GPU bound to vfio-pci)
_any_cc = st.one_of(
    st.builds(ComputeCapability, st.integers(0, 20), st.integers(0, 9)),
    st.just(ComputeCapability(-1, -1)),
)


@st.composite
def model_lists(draw: st.DrawFn) -> list[_Model]:
    """1-4 GPU models with distinct names.  Half the time each attribute is one of a table
    (GPU_NAMES, real memory sizes and compute capabilities), half the time anything (odd
    text, any size, any capability); MIG-capable or not.  An attribute is drawn for all
    the models at once, as indices into its table doubled: an index past the table's
    end stands for "anything"."""
    count = draw(st.integers(1, 4))
    names = draw_indices(draw, 2 * len(GPU_NAMES), count, count)
    sizes = draw_indices(draw, 2 * len(_MEMORIES), count, count)
    ccs = draw_indices(draw, 2 * len(_REAL_CCS), count, count)
    capable = draw_indices(draw, 2, count, count)
    models: dict[str, _Model] = {}
    for n in range(count):
        name = GPU_NAMES[names[n]] if names[n] < len(GPU_NAMES) else draw(_odd_text)
        size = _MEMORIES[sizes[n]] if sizes[n] < len(_MEMORIES) else draw(_any_memory)
        cc = ComputeCapability(*_REAL_CCS[ccs[n]]) if ccs[n] < len(_REAL_CCS) else draw(_any_cc)
        models.setdefault(name, _Model(name, size, cc, capable[n] == 1))
    return list(models.values())


@st.composite
def machines(draw: st.DrawFn) -> str | None:
    """No machine, one of MACHINES or odd text (a third each)."""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return None
    return draw(st.sampled_from(MACHINES)) if kind == 1 else draw(_odd_text)


@st.composite
def vgpus(draw: st.DrawFn) -> Vgpu | None:
    """No vGPU scan (it failed) or a scan that found nothing (a quarter each), or one that
    found 1-3 devices, each half the time one of VGPU_DEVICES, half the time odd text for
    its version and branch."""
    kind = draw(st.integers(0, 3))
    if kind < 2:
        return None if kind == 0 else Vgpu()
    picks = draw_indices(draw, 2 * len(VGPU_DEVICES), 1, 3)
    devices = (
        VGPU_DEVICES[pick] if pick < len(VGPU_DEVICES) else (draw(_odd_text), draw(_odd_text))
        for pick in picks
    )
    return Vgpu(tuple(VgpuDevice(version, branch) for version, branch in devices))


_model_lists = model_lists()
_machines = machines()
_vgpus = vgpus()
_PALETTE = tuple(sorted(MIG_PROFILES))
_palettes = index_strings(len(_PALETTE), min_size=1, max_size=3).map(
    lambda picks: [_PALETTE[pick] for pick in indices(picks)]
)


def mig_device(profile: str) -> MigDevice:
    memory, sms, (gi, ci), engines = MIG_PROFILES[profile]
    return MigDevice(profile, memory, sms, MigSlices(gi, ci), MigEngines(*engines))


_fabric_modes = st.sampled_from(["none", "shared", "partial", "varying"])
#: random: each MIG-capable GPU on or off; all-enabled: every MIG-capable GPU on; uniform:
#: every GPU MIG-capable and on with >= 1 device of a single profile (single's valid case)
_mig_modes = st.sampled_from(["random", "all-enabled", "uniform"])


@st.composite
def snapshots(draw: st.DrawFn, max_gpus: int = 8) -> Snapshot:
    """A valid v1 snapshot (one the loader accepts)."""
    indices = list(dict.fromkeys(draw_indices(draw, 64, max_size=max_gpus)))
    driver: Driver | None = Driver(draw(_driver_versions), draw(cuda_versions))
    if not indices and draw(st.booleans()):
        driver = None  # NVML unavailable: no driver, no GPUs
    machine = draw(_machines)
    vgpu = draw(_vgpus)

    models = draw(_model_lists)
    palette = draw(_palettes)
    mig_mode = draw(_mig_modes)
    if mig_mode == "uniform":
        palette = palette[:1]
    fabric_mode = draw(_fabric_modes)
    shared_fabric = Fabric(draw(st.sampled_from(CLUSTER_UUIDS)), draw(st.integers(0, 3)))

    # one draw per decision for all the GPUs at once (draw_indices): the model, the PCI
    # class, MIG on/off (random mode), devices on a disabled GPU (1 in 10), a partial
    # fabric's presence and a varying fabric's cluster and clique
    count = len(indices)
    per_gpu = {
        "model": len(models), "pci_class": len(PCI_CLASSES), "enabled": 2,
        "devices_when_disabled": 10, "fabric": 2, "cluster": len(CLUSTER_UUIDS), "clique": 3,
    }  # fmt: skip
    choice = {
        key: draw_indices(draw, options, count, count) if count else []
        for key, options in per_gpu.items()
    }
    gpus = []
    for n, index in enumerate(indices):
        model = models[choice["model"][n]]
        mig: Mig | None = None
        if model.mig_capable or mig_mode == "uniform":
            enabled = mig_mode != "random" or choice["enabled"][n] == 1
            profiles: list[str] = []
            if enabled or choice["devices_when_disabled"][n] == 9:
                least = 1 if mig_mode == "uniform" else 0
                picks = draw_indices(draw, len(palette), min_size=least, max_size=7)
                profiles = [palette[pick] for pick in picks]
            mig = Mig(enabled=enabled, devices=tuple(mig_device(p) for p in profiles))
        fabric: Fabric | None = None
        if fabric_mode == "shared" or (fabric_mode == "partial" and choice["fabric"][n] == 1):
            fabric = shared_fabric
        elif fabric_mode == "varying":
            fabric = Fabric(CLUSTER_UUIDS[choice["cluster"][n]], choice["clique"][n])
        gpus.append(
            Gpu(
                index=index, uuid=f"GPU-{index:08x}-a537-ccbf-2965-8e9d90c0bd54", name=model.name,
                pci_bus_id=f"0000:{index + 7:02x}:00.0",
                pci_class=PCI_CLASSES[choice["pci_class"][n]], memory_mib=model.memory_mib,
                compute_capability=model.compute_capability, mig=mig, fabric=fabric,
            )
        )  # fmt: skip
    return Snapshot(driver=driver, machine=machine, vgpu=vgpu, gpus=tuple(gpus))


mig_strategies = st.sampled_from(["none", "single", "mixed"])

# ---------------------------------------------------------------------------- configs

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

_NAME_EDGE = "abcdefghijklmnopqrstuvwxyz0123456789"


def _alphanumeric_edges(text: str) -> str:
    """``text`` (not empty) with a first and last character that are letters or digits:
    a ``-`` there becomes ``x``, a ``.`` becomes ``0``."""
    edge = str.maketrans("-.", "x0")
    if len(text) == 1:
        return text.translate(edge)
    return text[0].translate(edge) + text[1:-1] + text[-1].translate(edge)


#: [a-z0-9]([-a-z0-9.]{0,44}[a-z0-9])? -- drawn as one string, not with st.from_regex,
#: which costs a choice (and a span) a character
_random_names = st.text(alphabet=_NAME_EDGE + "-.", min_size=1, max_size=46).map(
    _alphanumeric_edges
)

#: resource names: upstream's defaults (so patterns can collide with them), the seed's
#: names, and random lowercase DNS labels
_common_names = st.sampled_from(
    ["gpu", "a100", "h100", "big", "mig-small", "mig-1g.5gb", "mig-1g.5gb.me", "x", "a..b"]
)
resource_names = _common_names | _random_names

_PATTERN_PIECES = (
    *("*", "NVIDIA ", "A100", "H100", "-SXM4-", "40GB", "80GB", "(Pascal)", " "),
    *("1g.", "5gb", "+me", "g.", "gb", "Tesla", "x"),
)
_odd_pieces = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@st.composite
def _pieced(draw: st.DrawFn, odd: bool) -> str:
    """1-4 pieces joined: each one of _PATTERN_PIECES, or (if ``odd``, half the time) odd
    text that is not empty."""
    picks = draw_indices(draw, len(_PATTERN_PIECES) * (2 if odd else 1), 1, 4)
    return "".join(
        _PATTERN_PIECES[pick] if pick < len(_PATTERN_PIECES) else draw(_odd_pieces)
        for pick in picks
    )


@st.composite
def _starred(draw: st.DrawFn, texts: tuple[str, ...]) -> str:
    """One of ``texts`` with a random stretch (possibly empty) replaced by ``*``: a
    pattern that matches that text, and often others."""
    text = draw(st.sampled_from(texts))
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, len(text)))
    return text[:start] + "*" + text[end:]


_GPU_PATTERNS = ("*", "*A100*", "NVIDIA A100-*-40GB", "*H100*", "NVIDIA *", "*(Pascal)", "Tesla*")
_MIG_PATTERNS = ("*", "1g.*", "1g.5gb", "*+me", "*+me*", "*gb", "7g.*", "*c.*", "2g.10gb")

#: the three kinds of pattern text, a third each: a fixed pattern, a starred name, pieces
gpu_pattern_kinds = (st.sampled_from(_GPU_PATTERNS), _starred(GPU_NAMES[:20]), _pieced(odd=True))
mig_pattern_kinds = (
    st.sampled_from(_MIG_PATTERNS), _starred(tuple(sorted(MIG_PROFILES))), _pieced(odd=False),
)  # fmt: skip
_name_kinds = (_common_names, _random_names)


def resource_pattern(pattern: str, name: str) -> ResourcePattern:
    return ResourcePattern(pattern, name, wildcard_regex(pattern))


@st.composite
def _pattern_lists(
    draw: st.DrawFn, kinds: tuple[st.SearchStrategy[str], ...]
) -> tuple[ResourcePattern, ...]:
    """0-4 resource patterns: a text of one of ``kinds`` and a name of resource_names (a
    common name or a random one, half each).  The count and each pattern's kinds are drawn
    once for the list (draw_indices), not with st.lists and st.one_of: their per-element
    choices and spans cost more than the elements."""
    count = draw(st.integers(0, 4))
    texts = draw_indices(draw, len(kinds), count, count)
    names = draw_indices(draw, len(_name_kinds), count, count)
    return tuple(
        resource_pattern(draw(kinds[texts[n]]), draw(_name_kinds[names[n]])) for n in range(count)
    )


#: upstream's default names of the MIG resources under mixed (mig-<profile>, + -> .)
DEFAULT_MIG_NAMES = tuple(sorted("mig-" + profile.replace("+", ".") for profile in MIG_PROFILES))


def _dns_subdomain(name: str) -> str:
    """A name of _random_names made a DNS subdomain: each run of ``-`` and ``.`` with a
    ``.`` in it becomes one ``.`` (the edges are already letters or digits)."""
    return re.sub(r"-*\.[-.]*", ".", name)


#: names a sharing entry may refer to: the full-GPU default (a third of the time), another
#: likely resource name (a third), one that matches nothing or a random DNS name (a sixth each)
_sharing_targets = (
    st.just("gpu"), st.just("gpu"),
    st.sampled_from(("a100", "h100", "mig-small", "x", *DEFAULT_MIG_NAMES)),
    st.sampled_from(("a100", "h100", "mig-small", "x", *DEFAULT_MIG_NAMES)),
    st.sampled_from(("unused", "big")), _random_names.map(_dns_subdomain),
)  # fmt: skip


@st.composite
def sharings(draw: st.DrawFn) -> Sharing:
    """No sharing, or time-slicing or MPS of 1-4 distinct resources, each with 2-16
    replicas, renamed or not (each decision drawn once for all the resources)."""
    strategy = draw(st.sampled_from(("none", "time-slicing", "mps")))
    if strategy == "none":
        return Sharing()
    count = draw(st.integers(1, 4))
    kinds = draw_indices(draw, len(_sharing_targets), count, count)
    targets = list(dict.fromkeys(draw(_sharing_targets[kind]) for kind in kinds))
    replicas = draw_indices(draw, 15, len(targets), len(targets))  # 2-16
    renamed = draw_indices(draw, 2, len(targets), len(targets))
    resources = tuple(
        ReplicatedResource(
            name="nvidia.com/" + target, replicas=2 + replicas[n], renamed=renamed[n] == 1
        )
        for n, target in enumerate(targets)
    )
    return Sharing(strategy, resources)


_gpu_pattern_lists = _pattern_lists(gpu_pattern_kinds)
_mig_pattern_lists = _pattern_lists(mig_pattern_kinds)
_sharings = sharings()


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """A label configuration: resource patterns and a sharing section."""
    return Config(
        gpu_patterns=draw(_gpu_pattern_lists), mig_patterns=draw(_mig_pattern_lists),
        sharing=draw(_sharings),
    )  # fmt: skip


_configs = configs()


@st.composite
def config_documents(draw: st.DrawFn) -> tuple[str, Config]:
    """Config-file YAML text, and the Config the loader must make of it.

    Sharing entries here use ``renameByDefault`` (the loader's only source of
    ``renamed``) and names that are DNS subdomains, as the file format requires."""
    config = draw(_configs)
    rename_by_default = draw(st.booleans())
    document: dict[str, Any] = {"version": draw(st.sampled_from(("v1", "")))}
    resources: dict[str, Any] = {}
    if config.gpu_patterns:
        resources["gpus"] = [{"pattern": p.pattern, "name": p.name} for p in config.gpu_patterns]
    if config.mig_patterns:
        resources["mig"] = [{"pattern": p.pattern, "name": p.name} for p in config.mig_patterns]
    if resources:
        document["resources"] = resources
    sharing = Sharing()
    if config.sharing.strategy != "none":
        entries = tuple(
            ReplicatedResource(entry.name, entry.replicas, rename_by_default)
            for entry in config.sharing.resources
            if _DNS_SUBDOMAIN.fullmatch(entry.name.removeprefix("nvidia.com/"))
        )
        if entries:
            section = "mps" if config.sharing.strategy == "mps" else "timeSlicing"
            document["sharing"] = {
                section: {
                    "renameByDefault": rename_by_default,
                    "resources": [
                        {
                            # with or without the prefix: the loader adds it
                            "name": entry.name
                            if draw(st.booleans())
                            else entry.name.removeprefix("nvidia.com/"),
                            "replicas": entry.replicas,
                        }
                        for entry in entries
                    ],
                }
            }
            sharing = Sharing(config.sharing.strategy, entries)
    expected = Config(config.gpu_patterns, config.mig_patterns, sharing)
    # allow_unicode=False: PyYAML writes a lone U+0085 raw and reads it back as a space
    text = yaml.safe_dump(document, allow_unicode=False, sort_keys=False)
    return text, expected
