"""README's "Deploy" commands from a clone to a running DaemonSet; without an image (none is
published) the chart refuses in one line that says how to build and push one, rather than
leaving pods stuck pulling."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from tests.e2e.current import ADMIN_TOKEN, started
from tests.e2e.helm import CHART, NAMESPACE, helm

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "registry.example.com/team"
VERSION = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]  # type: ignore[index]


def deploy_commands() -> list[list[str]]:
    """README's first sh block under "## Deploy", $REGISTRY set, one argv per command."""
    section = (ROOT / "README.md").read_text().split("\n## Deploy\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    text = block.replace("\\\n", " ").replace("$REGISTRY", REGISTRY)
    return [
        shlex.split(line, comments=True)
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith(("#", "REGISTRY="))
    ]


def refusal_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "make push IMAGE=" in line]


def test_the_chart_without_an_image_refuses_in_one_line_naming_the_build(helm_bin: Path) -> None:
    done = helm(helm_bin, "template", "gfd", str(CHART), "-n", NAMESPACE, check=False)
    assert done.returncode != 0 and not done.stdout
    (line,) = refusal_lines(done.stderr)
    assert line.startswith("image.repository: ")
    assert f"make push IMAGE=<registry>/gfd:{VERSION}" in line
    assert "--set image.repository=<registry>/gfd" in line
    # the tag the user chose is the one the line names
    done = helm(helm_bin, "template", "gfd", str(CHART), "--set", "image.tag=2.0", check=False)
    assert refusal_lines(done.stderr) and "gfd:2.0)" in refusal_lines(done.stderr)[0]


def test_readme_deploy_pushes_what_the_chart_then_runs(helm_bin: Path, tmp_path: Path) -> None:
    commands = deploy_commands()
    (push,) = [c for c in commands if c[:2] == ["make", "push"]]
    image = push[2].removeprefix("IMAGE=")
    assert image == f"{REGISTRY}/gfd:{VERSION}"
    # what `make push` runs (make -n: printed, not run)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", *push[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert f"scripts/image.sh --push {image}" in done.stdout.splitlines()
    (install,) = [c for c in commands if c[:2] == ["helm", "install"]]
    with started() as plane:
        kubeconfig = str(plane.kubeconfig(tmp_path / "admin.kubeconfig", ADMIN_TOKEN))
        plane.ensure_namespace(NAMESPACE)
        # without the image: refused at install, in one line, and nothing is created
        bare = list(install)
        for i in reversed(range(len(bare) - 1)):
            if bare[i] == "--set" and bare[i + 1].startswith("image."):
                del bare[i : i + 2]
        assert not [a for a in bare if "image" in a]
        done = helm(helm_bin, "--kubeconfig", kubeconfig, *bare[1:], check=False)
        assert done.returncode != 0 and len(refusal_lines(done.stderr)) == 1, done.stderr
        daemonset = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/gfd"
        assert plane.get(daemonset) is None
        # README's command, as written
        done = helm(helm_bin, "--kubeconfig", kubeconfig, *install[1:], check=False)
        assert done.returncode == 0, done.stderr
        pod = plane.ok("GET", daemonset)["spec"]["template"]["spec"]
        assert {c["image"] for c in pod["containers"]} == {image}
