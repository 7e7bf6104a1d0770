"""`make push IMAGE=<registry>/gfd:<tag>` (scripts/image.sh --push): a name without a registry
is refused in one line before anything is built, since docker and buildah would send it to
Docker Hub's library."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: not the flags of a make that runs this suite (make test)
ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


@pytest.mark.parametrize("image", ["gfd:0.1.0", "gfd", "team/gfd:1", ""])
def test_push_refuses_an_image_without_a_registry(image: str) -> None:
    args = ["make", "--no-print-directory", "push"] + ([f"IMAGE={image}"] if image else [])
    done = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("push: ")]
    assert "names no registry" in line and "IMAGE=<registry>/gfd:<tag>" in line
    assert f"IMAGE={image or 'gfd:'}" in line


@pytest.mark.parametrize(
    "image", ["registry.example.com/team/gfd:0.1.0", "localhost:5000/gfd:1", "localhost/gfd:1"]
)
def test_push_builds_then_pushes_a_named_registry(image: str) -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "push", f"IMAGE={image}"], cwd=ROOT, env=ENV,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.stdout.splitlines() == [f"scripts/image.sh --push {image}"]
