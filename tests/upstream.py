"""Upstream GFD v0.20.0 and gfd on NVIDIA's mock NVML: the one place tests find the reference
programs and run them.  The programs come from ``../shared/nvidia-reference`` (unpacked once per
run for every xdist worker), else from the cache of ``scripts/bench-nvml-tools.sh``; the
``upstream_reference`` fixture (conftest) skips with one line where neither is at hand and fails
where the shared folder exists (an unpack that fails is a failure, never a skip).

``run_on_mock`` runs either program with the same mock profile, arguments and
environment.  ``run_both`` runs a oneshot of each for label comparisons: the mock answers NVML
only, so what it cannot fake is made the same for both programs: a folder made from the
profile's bus ids is bound over ``/sys/bus/pci/devices`` in a private mount namespace
(``unshare``), since both read each GPU's PCI class there (gpu.mode) and upstream crashes on a
function that is not an NVIDIA GPU (k8s-device-plugin v0.20.0
``internal/resource/nvml-device.go:102`` reads ``.Class`` through the nil that vendored
go-nvlib ``pkg/nvpci/nvpci.go:250`` and ``:298`` return); both read one machine-type file."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.process import GFD, ROOT, clean_env

SHARED = Path(ROOT).parent / "shared" / "nvidia-reference"
BENCH_TOOLS = Path(ROOT) / "scripts" / "bench-nvml-tools.sh"
PROFILES = ("a100", "b200", "gb200", "gb300", "h100", "l40s", "t4")
STRATEGIES = ("none", "single", "mixed")
TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"
PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
#: PCI class of a 3D controller (upstream: gpu.mode=compute) and of a VGA one (graphics)
CLASS_3D = "0x030200"
CLASS_VGA = "0x030000"
CONFIG_SPACE = bytes(256)
MOCK_REFUSED_PROFILE = (
    "Failed to load YAML config"  # no capability list: not a vGPU, for both programs' scans
)


@dataclass(frozen=True)
class Reference:
    """Where the reference programs are."""

    upstream: Path  # gpu-feature-discovery v0.20.0
    library_dir: Path  # holds the mock libnvidia-ml.so.1
    profiles: Path  # holds mock-nvml-config-<profile>.yaml

    def profile(self, name: str) -> Path:
        return self.profiles / f"mock-nvml-config-{name}.yaml"


def unpack_shared(into: Path) -> Reference:
    """The shared folder's programs, unpacked once into ``into`` (a lock keeps xdist
    workers from unpacking over each other; unpack.sh keeps files whose checksum holds)."""
    into.mkdir(parents=True, exist_ok=True)
    with open(into / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            ["sh", str(SHARED / "unpack.sh"), str(into)], capture_output=True, text=True
        )
    if done.returncode != 0:
        raise RuntimeError(f"{SHARED}/unpack.sh failed ({done.returncode}): {done.stderr}")
    return Reference(into / "gpu-feature-discovery", into, into)


def bench_tools() -> Reference | str:
    """The bench script's cached build (made when Go is at hand), or why there is none."""

    def path_of(name: str) -> Path:
        done = subprocess.run(
            [str(BENCH_TOOLS), "path", name], capture_output=True, text=True, check=True
        )
        return Path(done.stdout.strip())

    mock, upstream = path_of("mock-nvml"), path_of("upstream")
    if not ((mock / "libnvidia-ml.so.1").exists() and upstream.exists()):
        go = os.environ.get("GO", "/usr/local/go/bin/go")
        if not os.access(go, os.X_OK):
            return f"no {SHARED}, no Go at {go} to build the mock NVML and upstream GFD"
        done = subprocess.run([str(BENCH_TOOLS)], capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            return f"no {SHARED}; {BENCH_TOOLS.name} failed: {last}"
    return Reference(upstream, mock, mock / "configs")


def find_reference(shared_cache: Path) -> Reference | str:
    """The reference programs, or one line saying what is missing."""
    if SHARED.is_dir():
        return unpack_shared(shared_cache)
    return bench_tools()


def require_reference(shared_cache: Path) -> Reference:
    """The reference programs; where none is at hand the test skips with the one line (the
    shared folder, where it exists, unpacks or fails: never a skip)."""
    found = find_reference(shared_cache)
    if isinstance(found, str):
        pytest.skip(found)
    return found


# ------------------------------------------------------------------------ mock profiles


def profile_bus_ids(profile: Path) -> list[str]:
    """The sysfs names (``0000:1a:00.0``) of the profile's GPUs."""
    document = yaml.safe_load(profile.read_text())
    ids = [str(device["pci"]["bus_id"]) for device in document["devices"]]
    return [sysfs_name(bus_id) for bus_id in ids]


def sysfs_name(bus_id: str) -> str:
    domain, bus, rest = bus_id.split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{rest.lower()}"


def with_mig_enabled(profile: Path, into: Path) -> Path:
    """A copy of ``profile`` with MIG enabled on every GPU (the mock's ``mig:`` of
    ``device_defaults``; its per-device overrides do not carry ``mig``)."""
    text = profile.read_text()
    edited, count = re.subn(
        r'(mode_(?:current|pending): )"disabled"', r'\1"enabled"', text, count=2
    )
    if count != 2:
        raise AssertionError(f"{profile.name}: no mig mode_current/mode_pending to enable")
    into.write_text(edited)
    return into


def vgpu_config_space(version: str, branch: str) -> bytes:
    """A 256-byte config space whose capability list holds NVIDIA's vendor-specific vGPU
    capability ("VF") with its host-driver record (id 0: 10 bytes of version, 10 of
    branch), the layout both programs' vGPU scans walk."""
    space = bytearray(256)
    space[0x06] = 0x10  # status: capability list present
    space[0x34] = 0x40  # first capability
    record = bytes([0, 22]) + version.encode().ljust(10, b"\0") + branch.encode().ljust(10, b"\0")
    capability = bytes([0x09, 0x00, 5 + len(record)]) + b"VF" + record
    space[0x40 : 0x40 + len(capability)] = capability
    return bytes(space)


def with_name(profile: Path, name: str, into: Path) -> Path:
    """A copy of ``profile`` whose GPUs report ``name`` (``device_defaults.name``)."""
    text = profile.read_text()
    edited, count = re.subn(r'(?m)^(  name: )".*"$', lambda m: f'{m[1]}"{name}"', text, count=1)
    if count != 1:
        raise AssertionError(f"{profile.name}: no device_defaults name to replace")
    into.write_text(edited)
    return into


class _QuotingDumper(yaml.SafeDumper):
    """Every string double-quoted: the mock reads YAML 1.1 through Go, where an unquoted
    ``0421819085498`` (a serial PyYAML leaves bare) is a number and the profile is refused."""


_QuotingDumper.add_representer(
    str, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"')
)


def edited(profile: Path, into: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    """A copy of ``profile`` whose document ``edit`` changed in place (``system:`` holds the
    driver and CUDA versions, ``device_defaults:`` every GPU's keys, ``devices:`` one GPU's)."""
    document = yaml.safe_load(profile.read_text())
    edit(document)
    into.write_text(yaml.dump(document, Dumper=_QuotingDumper))
    return into


def memory(total_bytes: int) -> dict[str, int]:
    """A GPU's ``memory:`` in the mock's profile, all of it free."""
    return {
        "total_bytes": total_bytes, "reserved_bytes": 0, "free_bytes": total_bytes, "used_bytes": 0,
    }  # fmt: skip


def fake_pci_tree(
    bus_ids: list[str], pci_class: str, into: Path, config: bytes = CONFIG_SPACE
) -> Path:
    """A ``/sys/bus/pci/devices`` holding one NVIDIA function per bus id: the files
    upstream's go-nvlib requires (vendor, class, device, numa_node, resource) and the
    256-byte config space both programs' vGPU scans read."""
    into.mkdir(parents=True, exist_ok=True)
    for bus_id in bus_ids:
        device = into / bus_id
        device.mkdir(parents=True)
        for name, value in (
            ("vendor", NVIDIA_VENDOR), ("device", "0x2330"), ("class", pci_class),
            ("numa_node", "-1"), ("subsystem_vendor", NVIDIA_VENDOR),
            ("subsystem_device", "0x16c1"),
            ("resource", "0x0000000000000000 0x0000000000000000 0x0000000000000000"),
        ):  # fmt: skip
            (device / name).write_text(value + "\n")
        (device / "config").write_bytes(config)
    return into


# ------------------------------------------------------------------------ running both


def namespace_prefix(pci_tree: Path) -> list[str]:
    """argv prefix running a command with ``pci_tree`` bound over /sys/bus/pci/devices in
    a private mount namespace (a user namespace too, so that no root is needed)."""
    script = 'mount --bind "$0" /sys/bus/pci/devices && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(pci_tree)]


def namespace_problem() -> str | None:
    """Why a private mount namespace cannot be made here; None when it can."""
    if shutil.which("unshare") is None:
        return "no unshare (util-linux) to give both programs the same /sys/bus/pci/devices"
    with tempfile.TemporaryDirectory() as empty:
        probe = subprocess.run(
            [*namespace_prefix(Path(empty)), "true"], capture_output=True, text=True, timeout=30
        )
    if probe.returncode != 0:
        first = (probe.stderr.strip().splitlines() or ["no message"])[0]
        return f"unshare cannot make a private mount namespace: {first}"
    return None


@dataclass(frozen=True)
class Run:
    returncode: int
    labels: dict[str, str] | None  # None: no output file written
    log: str


def mock_env(ref: Reference, profile: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment (no GFD, mock or device variable from outside) on the mock's
    ``profile``, with ``env`` on top."""
    extra = {"LD_LIBRARY_PATH": str(ref.library_dir), "MOCK_NVML_CONFIG": str(profile)}
    # NVIDIA_VISIBLE_DEVICES (set in GPU containers) narrows gfd's lost-GPU check: not here
    clean = {
        k: v for k, v in clean_env().items()
        if not k.startswith("MOCK_NVML_") and k != "NVIDIA_VISIBLE_DEVICES"
    }  # fmt: skip
    return {**clean, **extra, **(env or {})}


def _run(
    command: Sequence[str], env: Mapping[str, str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command), stdin=subprocess.DEVNULL, capture_output=True, text=True,
        env=dict(env), cwd=cwd or ROOT, timeout=timeout,
    )  # fmt: skip


def run_on_mock(
    ref: Reference, program: str, args: Sequence[str], env: Mapping[str, str] | None = None, *,
    profile: str = "t4", cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``program`` (``upstream``: its binary; ``gfd``: its real NVML path, pynvml into the
    mock library) with ``args`` on the mock ``profile``."""
    command = [str(ref.upstream)] if program == "upstream" else list(GFD)
    return _run([*command, *args], mock_env(ref, ref.profile(profile), env), cwd)


def labels(text: str) -> dict[str, str]:
    """``key=value`` lines as a mapping, the timestamp label left out."""
    pairs = (line.split("=", 1) for line in text.splitlines() if line.startswith("nvidia.com/"))
    return {key: value for key, value in pairs if key != TIMESTAMP_LABEL}


def read_labels(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line)
    return {key: value for key, value in pairs}


def oneshot(argv: list[str], env: dict[str, str], output: Path) -> Run:
    done = _run(argv, env, timeout=120)
    if MOCK_REFUSED_PROFILE in done.stderr:
        # the mock falls back to its default node: a comparison there would prove nothing
        raise AssertionError(f"the mock refused {env['MOCK_NVML_CONFIG']}: {done.stderr[:500]}")
    labels = read_labels(output) if output.exists() else None
    return Run(done.returncode, labels, done.stdout + done.stderr)


def succeeded(run: Run, who: str) -> dict[str, str]:
    """The labels of a run that must have succeeded."""
    if run.returncode != 0 or run.labels is None:
        raise AssertionError(
            f"{who} exit {run.returncode}, labels {run.labels}:\n{run.log[-3000:]}"
        )
    return run.labels


def pci_tree(
    profile: Path, work: Path, pci_class: str = CLASS_3D, config: bytes = CONFIG_SPACE
) -> Path:
    """The faked ``/sys/bus/pci/devices`` of ``profile``: one NVIDIA function per GPU."""
    return fake_pci_tree(profile_bus_ids(profile), pci_class, work / "pci-devices", config)


def run_both(
    ref: Reference, profile: Path, work: Path, strategy: str = "none",
    config_file: Path | None = None, *, tree: Path | None = None,
    machine_type: str = "NVIDIA DGX Test 920-23687-2530-000\n",
) -> tuple[Run, Run]:  # fmt: skip
    """(upstream, gfd): each program's oneshot on ``profile`` with MIG strategy
    ``strategy``, the same machine-type file, the same faked PCI tree (``pci_tree`` unless
    given) and, when given, the same config file."""
    machine_type_file = work / "machine-type"
    machine_type_file.write_text(machine_type)
    env = mock_env(ref, profile)
    prefix = namespace_prefix(tree or pci_tree(profile, work))
    words = ["--oneshot", "--no-timestamp", "--use-node-feature-api=false"]
    words += ["--mig-strategy", strategy, "--machine-type-file", str(machine_type_file)]
    if config_file is not None:
        words += ["--config-file", str(config_file)]

    def run(program: list[str], output: Path, dashes: str) -> Run:
        argv = [*words, "--output-file", str(output)]
        flags = [dashes + word[2:] if word.startswith("--") else word for word in argv]
        return oneshot([*prefix, *program, *flags], env, output)

    upstream = run([str(ref.upstream)], work / "upstream.labels", "-")
    return upstream, run([sys.executable, "-m", "gfd"], work / "gfd.labels", "--")


def differences(upstream: dict[str, str], gfd: dict[str, str]) -> list[str]:
    """One line per label that differs: missing on one side, or another value."""
    return [
        f"{key}: upstream {upstream.get(key)!r}, gfd {gfd.get(key)!r}"
        for key in sorted(upstream.keys() | gfd.keys()) if upstream.get(key) != gfd.get(key)
    ]  # fmt: skip


def alike(upstream: Run, ours: Run) -> dict[str, str]:
    """gfd's labels, after both programs succeeded with equal label files."""
    theirs, labels = succeeded(upstream, "upstream"), succeeded(ours, "gfd")
    assert not differences(theirs, labels), (
        "\n".join(differences(theirs, labels))
        + f"\n--- upstream log:\n{upstream.log[-2000:]}\n--- gfd log:\n{ours.log[-2000:]}"
    )
    return labels
