"""The container image, built from the Dockerfile and run: its version, a oneshot pass on a
mounted snapshot as the image's non-root user (the same labels as gfd from the source tree),
and without a driver the NVML failure as one clear line. Built with `make image`'s script
(buildah where no Docker engine answers); skips without buildah outside CI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e import image

SNAPSHOTS = image.ROOT / "examples" / "snapshots"


@pytest.fixture(scope="module")
def ctr() -> Iterator[str]:
    with image.container(image.build()) as name:
        yield name


def test_the_image_runs_gfd_as_uid_65532_by_default(ctr: str) -> None:
    config = json.loads(
        subprocess.run(
            ["buildah", "inspect", "--type", "image", image.IMAGE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["OCIv1"]["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["gfd"]
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in config["Env"]
    assert "NVIDIA_VISIBLE_DEVICES=all" in config["Env"]
    done = image.run(ctr, ["id", "-u"])
    assert done.stdout.strip() == "65532"


def test_version(ctr: str) -> None:
    done = image.run(ctr, ["gfd", "--version"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"gfd {image.version()}"


def host_labels(snapshot: Path, *args: str) -> str:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gfd",
            "--oneshot",
            "--no-timestamp",
            "--snapshot-file",
            str(snapshot),
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.parametrize(
    ("snapshot", "args"),
    [("dgx-a100.yaml", ()), ("dgx-a100.yaml", ("--mig-strategy", "mixed"))],
)
def test_oneshot_on_a_mounted_snapshot_as_the_non_root_user(
    ctr: str, snapshot: str, args: tuple[str, ...]
) -> None:
    done = image.run(
        ctr,
        ["gfd", "--oneshot", "--no-timestamp", "--snapshot-file", f"/snap/{snapshot}", *args],
        user="65532:65532",
        volumes=[f"{SNAPSHOTS}:/snap:ro"],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == host_labels(SNAPSHOTS / snapshot, *args)
    assert "nvidia.com/gpu.product=" in done.stdout


def test_without_a_driver_nvml_fails_with_one_clear_line(ctr: str) -> None:
    done = image.run(ctr, ["gfd", "--oneshot"])
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "libnvidia-ml.so.1" in lines[0] and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_without_a_driver_and_no_fail_on_init_error_only_the_minimal_labels(ctr: str) -> None:
    done = image.run(ctr, ["gfd", "--oneshot", "--no-timestamp", "--no-fail-on-init-error"])
    assert done.returncode == 0, done.stderr
    keys = {line.split("=", 1)[0] for line in done.stdout.splitlines()}
    assert keys <= {"nvidia.com/vgpu.present"}, done.stdout


def test_bad_input_is_one_line_and_exit_2(ctr: str) -> None:
    done = image.run(ctr, ["gfd", "--oneshot", "--mig-strategy", "bogus"])
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "--mig-strategy" in done.stderr and "bogus" in done.stderr


def test_gfds_virtualenv_carries_no_installer(ctr: str) -> None:
    done = image.run(ctr, ["ls", "/opt/gfd/bin"])
    assert done.returncode == 0, done.stderr
    assert "gfd" in done.stdout.split()
    assert not [name for name in done.stdout.split() if name.startswith("pip")]


def test_the_image_carries_no_installer_at_all(ctr: str) -> None:
    # the base image's own pip is removed too: nothing in the image can install a package
    for command in (["pip", "--version"], ["pip3", "--version"], ["python3", "-m", "pip"]):
        done = image.run(ctr, command)
        assert done.returncode != 0, (command, done.stdout)


def test_gfd_from_the_image_labels_a_node_on_the_real_api_server(ctr: str, tmp_path: Path) -> None:
    from tests.e2e.current import pod_token, started
    from tests.test_manifests import tool

    with started() as plane:
        plane.apply_all(tool.render(tool.Variant("node-labels")))
        plane.create_node("gpu-node-1")
        token = pod_token(plane, "gpu-feature-discovery", "gfd", "gpu-node-1")
        # readable by the image's user (65532), as a mounted service-account secret is
        kube = tmp_path / "kube"
        kube.mkdir(mode=0o755)
        # the server's CA beside the kubeconfig, at its path in the container (as a pod's
        # mounted service-account CA is): the host's path may be one the container shadows
        # (its own /tmp or /dev/shm, where temporary files may be)
        config_path = plane.kubeconfig(kube / "kubeconfig", token, "gpu-feature-discovery")
        shutil.copyfile(plane.ca_file, kube / "ca.crt")
        (kube / "ca.crt").chmod(0o644)
        config = yaml.safe_load(config_path.read_text())
        config["clusters"][0]["cluster"]["certificate-authority"] = "/kube/ca.crt"
        config_path.write_text(yaml.safe_dump(config))
        config_path.chmod(0o644)
        done = image.run(
            ctr,
            [
                "gfd",
                "--oneshot",
                "--no-timestamp",
                "--use-node-labels",
                "--node-name",
                "gpu-node-1",
                "--kubeconfig",
                "/kube/kubeconfig",
                "--snapshot-file",
                "/snap/dgx-a100.yaml",
            ],
            volumes=[f"{kube}:/kube:ro", f"{SNAPSHOTS}:/snap:ro"],
            network_host=True,
        )
        assert done.returncode == 0, done.stderr
        labels = plane.ok("GET", "/api/v1/nodes/gpu-node-1")["metadata"]["labels"]
        expected = dict(
            line.split("=", 1) for line in host_labels(SNAPSHOTS / "dgx-a100.yaml").splitlines()
        )
        assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/")} == expected
