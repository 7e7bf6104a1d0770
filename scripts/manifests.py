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
import functools
import os
import re
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
    "node-config",
    "dra",
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


def _kustomize(command: list[str], directory: Path) -> str:
    done = subprocess.run([*command, str(directory)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RenderError(f"{shlex.join(command)} {directory}: {done.stderr.strip()}")
    return done.stdout


def build_directory(directory: Path) -> str:
    """kustomize's output for ``directory``."""
    command = kustomize_command()
    if command is None:
        raise RenderError("no kustomize: install kubectl or kustomize, or set $KUSTOMIZE")
    return _kustomize(command, directory)


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


# Strict schema validation, the way kubernetes_validate.validate(obj, version, strict=True)
# does it (kubernetes_validate/utils.py: the newest schema directory not newer than the
# version, <kind>-<group>-<version>.json in it, resolved against that directory's
# _definitions.json with a Draft 2020-12 validator, the first error raised) -- but each
# schema file is read once and each validator built once per process.  The library reads
# and decodes its 1.3 MB _definitions.json again on every call (~6 ms), which was most of
# the time of validating the ~100 objects of all the variants.


@functools.cache
def _schema_versions() -> tuple[str, ...]:
    import kubernetes_validate.utils as kv

    versions: list[str] = kv.all_versions()
    return tuple(versions)


@functools.cache
def _schema_contents(filename: str, version: str) -> Any:
    import kubernetes_validate.utils as kv

    return kv.schema_contents(filename, version)


@functools.cache
def _validator(schema_dir: str, kind: str, api_version: str, version: str) -> Any:
    """The validator of one kind's schema, ``None`` where the package has no such schema."""
    import jsonschema  # type: ignore[import-untyped]
    from referencing import Registry, Resource

    try:
        schema = _schema_contents(
            f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{api_version}.json", version
        )
    except FileNotFoundError:
        return None
    definitions = _schema_contents(
        f"kubernetes-json-schema/{schema_dir}/_definitions.json", version
    )
    registry: Registry[Any] = Resource.from_contents(definitions) @ (
        Resource.from_contents(schema) @ Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _validate(obj: Manifest, version: str) -> None:
    """``kubernetes_validate.validate(obj, version, strict=True)``, with cached schemas."""
    import kubernetes_validate.utils as kv

    version = version.removeprefix("v")
    wanted = kv.major_minor(version)
    if wanted > kv.major_minor(_schema_versions()[-1]):
        raise kv.VersionNotSupportedError(version=wanted)
    resolved = [v for v in _schema_versions() if kv.major_minor(v) <= wanted][-1]
    # rbac.authorization.k8s.io/v1 -> rbac-v1, apps/v1 -> apps-v1, v1 -> v1
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", obj["apiVersion"])
    validator = _validator(f"v{resolved}-local-strict", obj["kind"], api_version, version)
    if validator is None:
        raise kv.SchemaNotFoundError(
            version=wanted, kind=obj["kind"], api_version=obj["apiVersion"]
        )
    validator.validate(obj)


def validation_errors(obj: Manifest, version: str) -> list[str]:
    """Schema errors of one object for one Kubernetes version (strict: no unknown fields)."""
    import jsonschema
    import kubernetes_validate.utils as kv

    try:
        _validate(obj, version)
    except jsonschema.ValidationError as error:
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
