"""Render gfd's kustomize overlays and validate every object offline.

    python scripts/manifests.py render [--out dist/manifests]
    python scripts/manifests.py validate [--kubernetes-version 1.30 ...]

`render` writes one file per overlay (manifests/overlays/<name>) to <out>/<name>.yaml.
`validate` builds every overlay, and every long-running overlay with each optional
component (manifests/components/*), and checks each object against the Kubernetes
OpenAPI schemas of the `kubernetes-validate` package in strict mode (an unknown field --
a typo -- is an error), for the oldest Kubernetes version the manifests support and the
newest the package knows.

Rendering uses real kustomize: `kubectl kustomize`, or `kustomize build` when kubectl is
missing, or the command in $KUSTOMIZE. The Job overlays carry the placeholder TARGET_NODE
(the node to run on); it is replaced by a sample node name before validation, exactly as
the documented `sed` does.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
OVERLAYS = MANIFESTS / "overlays"
COMPONENTS = MANIFESTS / "components"

# ValidatingAdmissionPolicy v1 and the node name in pod-bound service account tokens
# (the node-labels overlay) both need 1.30.
MIN_KUBERNETES_VERSION = "1.30"
NODE_PLACEHOLDER = "TARGET_NODE"
SAMPLE_NODE = "gpu-node-1"

# Components that apply to any overlay that runs the gfd container (DaemonSet or Job).
WORKLOAD_COMPONENTS = (
    "mig-single",
    "mig-mixed",
    "vgpu-privileged",
    "runtime-class-nvidia",
    "koordlet",
)
# Components that are themselves a way of running (used by an overlay already).
USE_COMPONENTS = ("nfd-worker-sidecar",)

Manifest = dict[str, Any]


class RenderError(RuntimeError):
    """kustomize is missing, or refused to build a kustomization."""


@dataclass(frozen=True)
class Variant:
    """One thing to build: an overlay, optionally with extra components."""

    overlay: str
    components: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return "+".join((self.overlay, *self.components))


def overlays() -> list[str]:
    return sorted(p.parent.name for p in OVERLAYS.glob("*/kustomization.yaml"))


def components() -> list[str]:
    return sorted(p.parent.name for p in COMPONENTS.glob("*/kustomization.yaml"))


def variants() -> list[Variant]:
    """Every overlay, and every overlay with each workload component added."""
    result = [Variant(o) for o in overlays()]
    for overlay in overlays():
        result.extend(Variant(overlay, (c,)) for c in WORKLOAD_COMPONENTS)
    return result


def kustomize_command() -> list[str] | None:
    """The command that builds a kustomization directory given as its last argument."""
    configured = os.environ.get("KUSTOMIZE")
    if configured:
        return shlex.split(configured)
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def build_directory(directory: Path) -> str:
    command = kustomize_command()
    if command is None:
        raise RenderError("no kustomize: install kubectl or kustomize, or set $KUSTOMIZE")
    done = subprocess.run([*command, str(directory)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RenderError(f"{shlex.join(command)} {directory}: {done.stderr.strip()}")
    return done.stdout


def build(variant: Variant) -> str:
    """Rendered YAML of one variant (placeholders not yet substituted)."""
    overlay_dir = OVERLAYS / variant.overlay
    if not variant.components:
        return build_directory(overlay_dir)
    # kustomize takes components only from a kustomization file: write a throw-away one
    # that refers to the overlay and the components by relative path.
    with tempfile.TemporaryDirectory(prefix="gfd-kustomize-") as tmp:
        here = Path(tmp)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(overlay_dir, here)],
            "components": [os.path.relpath(COMPONENTS / c, here) for c in variant.components],
        }
        (here / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return build_directory(here)


def substitute_placeholders(rendered: str, node: str = SAMPLE_NODE) -> str:
    return rendered.replace(NODE_PLACEHOLDER, node)


def load_objects(rendered: str) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc is not None]


def render(variant: Variant) -> list[Manifest]:
    """The objects of one variant, as they would be applied (placeholders substituted)."""
    return load_objects(substitute_placeholders(build(variant)))


def describe(obj: Manifest) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = metadata.get("name", "?")
    return f"{obj.get('kind', '?')} {namespace + '/' if namespace else ''}{name}"


def kubernetes_versions() -> list[str]:
    import kubernetes_validate.utils as kv  # type: ignore[import-untyped]

    newest: str = kv.major_minor(kv.latest_version())
    return sorted({MIN_KUBERNETES_VERSION, newest}, key=lambda v: tuple(map(int, v.split("."))))


def validation_errors(obj: Manifest, version: str) -> list[str]:
    """Schema errors of one object for one Kubernetes version (strict: no unknown fields)."""
    import kubernetes_validate
    import kubernetes_validate.utils as kv

    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kv.ValidationError as error:
        where = "/".join(str(p) for p in error.path) or "(top)"
        return [f"{describe(obj)} (Kubernetes {version}): {where}: {error.message}"]
    except kv.SchemaNotFoundError as error:
        return [f"{describe(obj)} (Kubernetes {version}): {error.message}"]
    return []


def validate_objects(objects: Sequence[Manifest], versions: Sequence[str]) -> list[str]:
    return [e for obj in objects for version in versions for e in validation_errors(obj, version)]


def _validate_all(versions: Sequence[str]) -> Iterator[str]:
    for variant in variants():
        try:
            objects = render(variant)
        except RenderError as error:
            yield f"{variant.name}: {error}"
            continue
        errors = validate_objects(objects, versions)
        yield from (f"{variant.name}: {e}" for e in errors)
        if not errors:
            print(f"ok  {variant.name}: {len(objects)} objects", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    render_cmd = commands.add_parser("render", help="write each overlay to OUT/<overlay>.yaml")
    render_cmd.add_argument("--out", type=Path, default=ROOT / "dist" / "manifests")
    validate_cmd = commands.add_parser("validate", help="validate every overlay and variant")
    validate_cmd.add_argument(
        "--kubernetes-version",
        action="append",
        dest="versions",
        help=f"repeatable; default: {MIN_KUBERNETES_VERSION} and the newest known",
    )
    args = parser.parse_args(argv)

    try:
        if args.command == "render":
            args.out.mkdir(parents=True, exist_ok=True)
            for overlay in overlays():
                target = args.out / f"{overlay}.yaml"
                target.write_text(build(Variant(overlay)))
                print(target)
            return 0
        errors = list(_validate_all(args.versions or kubernetes_versions()))
    except RenderError as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    for message in errors:
        print(f"error: {message}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
