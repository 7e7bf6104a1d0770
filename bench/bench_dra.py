"""What ``--device-discovery-strategy dra`` costs the API server, and how soon it labels:
N gfd daemons, each a node of its own with 8 GPUs in a pool of two ResourceSlices, against
one real kube-apiserver with etcd (the e2e layer's control plane).

Run from the repository root (the e2e tools built: ``make e2e-tools``):
``.venv/bin/python bench/bench_dra.py [--nodes 5] [--window 180]``

Two groups of N nodes run side by side, each process with a token of its own: ``watch``
(the ClusterRole of manifests/components/dra: ``list`` and ``watch`` on resourceslices)
and ``list`` (the same role without ``watch``: gfd's fallback, a list per pass).  Both run
at the default 60 s interval and write a features file (no API output), so every request
counted is a read of slices.  Figures:

- start-up to first labels: seconds from the process's start to its features file
  holding ``nvidia.com/gpu.count`` (median and slowest over the nodes of a group);
- steady state: requests per node per hour over a window, read from the API server's audit
  log (one request per audit ID, by ``requestReceivedTimestamp``), never from gfd; a watch
  is renewed about every 34 minutes (timeoutSeconds 1800-2250), past any window: that
  renewal is added as 3600/2025 an hour, as bench_fleet.py does;
- relabel: seconds from a generation bump of every node's pool (a third GPU... ninth) to
  the node's features file showing it (median and slowest), at the 60 s interval.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dra_slices import slices_for  # noqa: E402
from tests.e2e import controlplane, servers  # noqa: E402
from tests.e2e.controlplane import ControlPlane  # noqa: E402
from tests.helpers import gpu, node  # noqa: E402

GROUPS = ("watch", "list")
RBAC = ROOT / "manifests/components/dra/rbac.yaml"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
#: gfd's watch renewals an hour (a stream lasts 1800-2250 s: gfd/kube/watch.py)
WATCH_RENEWALS_PER_HOUR = 3600 / 2025
GPUS = 8


def grant(plane: ControlPlane) -> None:
    """The component's ClusterRole to the watch group; the same without watch to the list
    group."""
    role = next(o for o in yaml.safe_load_all(RBAC.read_text()) if o["kind"] == "ClusterRole")
    for group in GROUPS:
        mine = {**role, "metadata": {"name": f"bench-dra-{group}"}}
        if group == "list":
            mine["rules"] = [{**rule, "verbs": ["list"]} for rule in role["rules"]]
        plane.apply(mine)
        plane.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"bench-dra-{group}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": f"bench-dra-{group}",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Group",
                        "name": f"bench-dra-{group}",
                    }
                ],
            }
        )


def publish(plane: ControlPlane, name: str, gpus: int, generation: int) -> None:
    snap = node(*(gpu(index) for index in range(gpus)))
    for item in slices_for(snap, name, generation=generation, split=2):
        plane.create(item)


def start(name: str, kubeconfig: Path, output: Path, workdir: Path) -> subprocess.Popen[bytes]:
    """One node's gfd: the dra strategy, the default interval, a features file."""
    argv = [
        sys.executable, "-m", "gfd", "--device-discovery-strategy", "dra", "--node-name", name,
        "--kubeconfig", str(kubeconfig), "--no-timestamp", "--output-file", str(output),
        "--log-format", "json",
    ]  # fmt: skip
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir)}
    with (workdir / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip


def count_of(path: Path) -> str | None:
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        if line.startswith("nvidia.com/gpu.count="):
            return line.split("=", 1)[1]
    return None


def wait_all(outputs: dict[str, Path], want: str, since: float, limit: float) -> dict[str, float]:
    """Seconds after ``since`` until each node's file shows ``want`` GPUs."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + limit
    while len(seen) < len(outputs) and time.monotonic() < deadline:
        for name, path in outputs.items():
            if name not in seen and count_of(path) == want:
                seen[name] = time.monotonic() - since
        time.sleep(0.05)
    missing = set(outputs) - set(seen)
    if missing:
        raise SystemExit(f"no labels after {limit} s on {sorted(missing)}")
    return seen


def requests_by_user(plane: ControlPlane, mark: int, since: float) -> dict[str, int]:
    """Requests (by audit ID) received after ``since``, per bench user."""
    seen: dict[str, str] = {}
    for event in plane.audit_events(mark):
        user = (event.get("user") or {}).get("username", "")
        if not user.startswith("user-dra-"):
            continue
        received = datetime.datetime.fromisoformat(
            event["requestReceivedTimestamp"].replace("Z", "+00:00")
        ).timestamp()
        if received >= since:
            seen.setdefault(event["auditID"], user)
    counts: dict[str, int] = {}
    for user in seen.values():
        counts[user] = counts.get(user, 0) + 1
    return counts


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s, slowest {max(values):.2f} s"


def run(args: argparse.Namespace) -> list[str]:
    names = {group: [f"dra-{group}-{i:02d}" for i in range(args.nodes)] for group in GROUPS}
    tokens = [
        (f"token-{name}", f"user-{name}", f"bench-dra-{group}")
        for group in GROUPS
        for name in names[group]
    ]
    lines: list[str] = []
    processes: list[subprocess.Popen[bytes]] = []
    with (
        tempfile.TemporaryDirectory(prefix="gfd-dra-") as tmp,
        controlplane.running(servers.CURRENT, extra_tokens=tokens) as plane,
    ):
        workdir = Path(tmp)
        grant(plane)
        for group in GROUPS:
            plane.wait_for(
                f"RBAC of {group}",
                lambda group=group: plane.allowed(  # type: ignore[misc]
                    f"user-{names[group][0]}", [f"bench-dra-{group}"], "list",
                    "resourceslices", group="resource.k8s.io",
                ),
            )  # fmt: skip
        for name in names["watch"] + names["list"]:
            publish(plane, name, GPUS, 1)
        outputs = {name: workdir / f"{name}.labels" for group in GROUPS for name in names[group]}
        started: dict[str, float] = {}
        try:
            for group in GROUPS:
                for name in names[group]:
                    kubeconfig = plane.kubeconfig(
                        workdir / f"{name}.kubeconfig", token=f"token-{name}"
                    )
                    started[name] = time.monotonic()
                    processes.append(start(name, kubeconfig, outputs[name], workdir))
            first: dict[str, float] = {}
            for name, path in outputs.items():
                first[name] = wait_all({name: path}, str(GPUS), started[name], 120)[name]
            for group in GROUPS:
                values = [first[name] for name in names[group]]
                lines.append(f"{group}: start-up to first labels: {spread(values)}")
            time.sleep(args.settle)
            mark, wall, began = plane.audit_mark(), time.time(), time.monotonic()
            time.sleep(args.window)
            elapsed = time.monotonic() - began
            counted = requests_by_user(plane, mark, wall)
            for group in GROUPS:
                per_node = [
                    counted.get(f"user-{name}", 0) * 3600 / elapsed for name in names[group]
                ]
                renewals = WATCH_RENEWALS_PER_HOUR if group == "watch" else 0.0
                lines.append(
                    f"{group}: steady state: {statistics.median(per_node) + renewals:.1f} "
                    f"requests per node per hour (window {elapsed:.0f} s)"
                )
            bumped = time.monotonic()
            for name in outputs:
                publish(plane, name, GPUS + 1, 2)
            relabel = wait_all(outputs, str(GPUS + 1), bumped, 120)
            for group in GROUPS:
                values = [relabel[name] for name in names[group]]
                lines.append(f"{group}: generation bump to relabel: {spread(values)}")
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
    lines.append(
        f"kube-apiserver {servers.CURRENT.version}; {args.nodes} nodes a group, {GPUS} GPUs "
        "in 2 slices each, default 60 s interval"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--window", type=float, default=180.0, help="steady-state seconds")
    parser.add_argument("--settle", type=float, default=5.0)
    for line in run(parser.parse_args()):
        print(line)


if __name__ == "__main__":
    main()
