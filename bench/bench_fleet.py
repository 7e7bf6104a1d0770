"""A fleet of simulated nodes, gfd beside upstream GFD v0.20.0, against one real
kube-apiserver with etcd (the e2e layer's control plane), NodeFeature output on both sides.

Run from the repository root (the e2e tools built: ``make e2e-tools``):
``.venv/bin/python bench/bench_fleet.py [--nodes 10]``

Each node is a process of its own with a node name and a static token of its own (the API
server's ``--token-auth-file``; RBAC: the NodeFeature Role bound to the fleet's group): N
gfd daemons (``python -m gfd``) and N upstream binaries
(``../shared/nvidia-reference/gpu-feature-discovery``), all discovering NVIDIA's mock NVML
(8x A100 profile).  Both run at the default 60 s interval -- upstream is not sped up, so
no figure of it is scaled except "per hour" (a window's count times 3600 / its length).

Every request figure is read from the API server's audit log (Metadata level, one line per
stage: requests are counted by audit ID, timed by ``requestReceivedTimestamp``), never from
gfd's counters.  Phases, in order:

1. steady state: requests and writes per node per hour over a window, and each process's
   RSS and CPU seconds per hour (``/proc``); gfd's watch is renewed about every 34 minutes
   (timeoutSeconds 1800-2250), past any window: that renewal is added as 3600/2025 an hour;
2. repair: every NodeFeature deleted at once (an NFD reinstall); seconds until each is back
   with its content (median and slowest over the nodes);
3. roll-out: every process stopped and started again, one node after another over 60 s
   (a rolling update; it also leaves the nodes' passes out of step, as in a real fleet);
   requests and writes per node until all have published;
4. outage: the API server killed for 30 s, every NodeFeature deleted from etcd meanwhile;
   after it is back, the fleet's peak requests per second (1 s and 5 s windows) and the
   seconds until every node's object is right again.  Repeated (``--outages``, 3 by
   default), because at ten nodes one outage is one random draw of who comes back when:
   the table gives the median of the repeats and their range;
5. another client's plain GET loop (latency p50/p99) with only gfd's fleet, only
   upstream's, and neither running.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e import controlplane, servers  # noqa: E402
from tests.e2e.controlplane import GFD_NAMESPACE, ControlPlane  # noqa: E402
from tests.e2e.gfdrun import CRD  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "nvidia-reference"
GROUP = "gfd-fleet"
SIDES = ("gfd", "upstream")
WRITES = frozenset({"create", "update", "patch", "delete"})
COLLECTION = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{GFD_NAMESPACE}/nodefeatures"
ETCD_PREFIX = f"/registry/nfd.k8s-sigs.io/nodefeatures/{GFD_NAMESPACE}/"
#: gfd's watch renewals an hour (a stream lasts 1800-2250 s: gfd/kube/watch.py)
WATCH_RENEWALS_PER_HOUR = 3600 / 2025


@dataclass
class Node:
    side: str
    index: int
    token: str
    kubeconfig: Path = Path()
    log: Path = Path()
    process: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # stopped on purpose: the kubelet stand-in leaves it
    crashes: int = 0
    restart_at: float | None = None

    @property
    def name(self) -> str:
        return f"fleet-{self.side}-{self.index:02d}"

    @property
    def user(self) -> str:
        return f"user-{self.name}"

    @property
    def object_path(self) -> str:
        return f"{COLLECTION}/nvidia-features-for-{self.name}"


@dataclass
class Fleet:
    plane: ControlPlane
    nodes: list[Node]
    reference: Path
    workdir: Path
    right: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> spec.labels

    def side(self, side: str) -> list[Node]:
        return [node for node in self.nodes if node.side == side]

    # ------------------------------------------------------------- processes

    def start(self, node: Node) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "LD_LIBRARY_PATH": str(self.reference),
            "MOCK_NVML_CONFIG": str(self.reference / "mock-nvml-config-a100.yaml"),
        }
        common = [
            "--use-node-feature-api", "--node-name", node.name, "--namespace", GFD_NAMESPACE,
            "--kubeconfig", str(node.kubeconfig), "--no-timestamp",
        ]  # fmt: skip
        if node.side == "gfd":
            argv = [sys.executable, "-m", "gfd", *common, "--log-format", "json"]
        else:
            argv = [str(self.reference / "gpu-feature-discovery"), *common]
        with node.log.open("ab") as log:
            node.process = subprocess.Popen(
                argv, stdout=log, stderr=log, env=env, cwd=ROOT, stdin=subprocess.DEVNULL
            )
        node.stopped = False  # only now: the kubelet stand-in never sees the old process

    def supervise(self) -> None:
        """What the kubelet does for a pod whose container exits (upstream exits on an API
        error: main.go "failed to get NodeFeature object"): start it again after 10 s, 20 s,
        40 s, ... at most 300 s (CrashLoopBackOff)."""
        now = time.monotonic()
        for node in self.nodes:
            process = node.process
            if node.stopped or process is None or process.poll() is None:
                continue
            if node.restart_at is None:
                node.crashes += 1
                node.restart_at = now + min(300.0, 10.0 * 2 ** (node.crashes - 1))
            elif now >= node.restart_at:
                node.restart_at = None
                self.start(node)

    def stop(self, nodes: list[Node]) -> None:
        for node in nodes:
            node.stopped = True
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()

    # ------------------------------------------------------------- objects

    def objects(self) -> dict[str, dict[str, str]]:
        """spec.labels of every NodeFeature, by node."""
        status, answer = self.plane.request("GET", COLLECTION)
        if status != 200:  # e.g. 429 while the server's storage initializes
            return {}
        found = {}
        for item in answer.get("items") or []:
            labels = (item.get("metadata") or {}).get("labels") or {}
            node = labels.get("nfd.node.kubernetes.io/node-name")
            if node:
                found[node] = dict((item.get("spec") or {}).get("labels") or {})
        return found

    def wait_right(self, since: float, limit: float) -> dict[str, float]:
        """Seconds after ``since`` at which each node's object was first seen right."""
        back: dict[str, float] = {}
        deadline = time.monotonic() + limit
        while len(back) < len(self.nodes) and time.monotonic() < deadline:
            try:
                objects = self.objects()
            except (OSError, AssertionError):
                objects = {}
            now = time.monotonic()
            for node in self.nodes:
                if node.name not in back and objects.get(node.name) == self.right[node.name]:
                    back[node.name] = now - since
            time.sleep(0.2)
        return back


# ----------------------------------------------------------------- the audit log


def audit_requests(plane: ControlPlane, mark: int, since: float) -> list[dict[str, Any]]:
    """One record per request (by audit ID) received after ``since`` (epoch seconds; the
    log is read from ``mark``): user, verb, received.  A watch opened earlier whose last
    stage is logged later is not a request of the window."""
    seen: dict[str, dict[str, Any]] = {}
    for event in plane.audit_events(mark):
        user = (event.get("user") or {}).get("username", "")
        if not user.startswith("user-fleet-"):
            continue
        received = datetime.datetime.fromisoformat(
            event["requestReceivedTimestamp"].replace("Z", "+00:00")
        ).timestamp()
        if received < since:
            continue
        code = (event.get("responseStatus") or {}).get("code")
        record = {"user": user, "verb": event.get("verb"), "received": received, "code": code}
        record = seen.setdefault(event["auditID"], record)
        record["code"] = code if code is not None else record["code"]  # the last stage's
    return list(seen.values())


def side_of(user: str) -> str:
    return "gfd" if user.startswith("user-fleet-gfd-") else "upstream"


def counts(records: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """(requests, writes) by side."""
    result = {side: [0, 0] for side in SIDES}
    for record in records:
        side = side_of(record["user"])
        result[side][0] += 1
        result[side][1] += record["verb"] in WRITES
    return {side: (value[0], value[1]) for side, value in result.items()}


def peaks(
    records: list[dict[str, Any]], since: float, window: float, nodes: bool = False
) -> dict[str, int]:
    """The most requests (``nodes``: distinct nodes sending) of each side in any
    ``window`` seconds after ``since``."""
    result = {}
    for side in SIDES:
        mine = sorted(
            (r["received"], r["user"])
            for r in records
            if side_of(r["user"]) == side and r["received"] >= since
        )
        best, start = 0, 0
        for end, (t, _) in enumerate(mine):
            while t - mine[start][0] >= window:
                start += 1
            inside = mine[start : end + 1]
            best = max(best, len({u for _, u in inside}) if nodes else len(inside))
        result[side] = best
    return result


# ----------------------------------------------------------------- /proc


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# ----------------------------------------------------------------- setup


def unpack_reference(workdir: Path) -> Path:
    target = workdir / "reference"
    target.mkdir()
    subprocess.run([str(REFERENCE / "unpack.sh"), str(target)], check=True, capture_output=True)
    return target


def grant(plane: ControlPlane) -> None:
    import yaml

    plane.apply_all([yaml.safe_load(CRD.read_text())])
    plane.wait_crd_established("nodefeatures.nfd.k8s-sigs.io")
    rbac = "rbac.authorization.k8s.io/v1"
    plane.apply(
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": {"name": "gfd-fleet", "namespace": GFD_NAMESPACE},
            "rules": [
                {
                    "apiGroups": ["nfd.k8s-sigs.io"],
                    "resources": ["nodefeatures"],
                    "verbs": ["get", "create", "update", "list", "watch"],
                }
            ],
        }
    )
    plane.apply(
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": "gfd-fleet", "namespace": GFD_NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "gfd-fleet",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}],
        }
    )


def etcd_delete_prefix(plane: ControlPlane, prefix: str) -> int:
    """Delete every key under ``prefix`` through etcd's JSON gateway; how many were."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps(
        {
            "key": base64.b64encode(prefix.encode()).decode(),
            "range_end": base64.b64encode(end.encode()).decode(),
        }
    ).encode()
    request = urllib.request.Request(f"{plane.etcd_url}/v3/kv/deleterange", data=body)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(json.loads(answer.read()).get("deleted", 0))


@dataclass
class Figures:
    steady: dict[str, tuple[float, float]] = field(default_factory=dict)
    rss: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    repair: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    rollout: dict[str, tuple[float, float]] = field(default_factory=dict)
    outage_peak: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    outage_recovery: dict[str, list[float]] = field(default_factory=dict)
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)
    floor: float = 0.0
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------- the phases


def steady(fleet: Fleet, figures: Figures, seconds: float) -> None:
    plane = fleet.plane
    mark, wall = plane.audit_mark(), time.time()
    started = time.monotonic()
    cpu_before = {n.name: cpu_seconds(n.process.pid) for n in fleet.nodes if n.process}
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    by_side = counts(audit_requests(plane, mark, wall))
    n = len(fleet.side("gfd"))
    for side in SIDES:
        requests, writes = by_side[side]
        per_hour = 3600 / elapsed / n
        renewals = WATCH_RENEWALS_PER_HOUR if side == "gfd" else 0.0
        figures.steady[side] = (requests * per_hour + renewals, writes * per_hour)
        nodes = [node for node in fleet.side(side) if node.process]
        figures.rss[side] = statistics.median(rss_mb(node.process.pid) for node in nodes)
        figures.cpu[side] = statistics.median(
            (cpu_seconds(node.process.pid) - cpu_before[node.name]) * 3600 / elapsed
            for node in nodes
        )


def repair(fleet: Fleet, figures: Figures) -> None:
    deleted = {}
    for node in fleet.nodes:
        fleet.plane.delete(node.object_path)
        deleted[node.name] = time.monotonic()
    first = min(deleted.values())
    back = {
        name: seconds + first - deleted[name]
        for name, seconds in fleet.wait_right(first, 150).items()
    }
    for side in SIDES:
        times = [back[node.name] for node in fleet.side(side) if node.name in back]
        missing = len(fleet.side(side)) - len(times)
        figures.repair[side] = (
            statistics.median(times) if times else float("nan"),
            max(times) if times else float("nan"),
            missing,
        )


def rollout(fleet: Fleet, figures: Figures, settle: float, spread: float) -> None:
    """A DaemonSet's rolling update: one node's pod after another (``spread`` seconds for
    a side), both sides at once; what they send until all have published."""
    plane = fleet.plane
    mark, wall = plane.audit_mark(), time.time()
    pairs = list(zip(fleet.side("gfd"), fleet.side("upstream"), strict=True))
    for gfd, upstream in pairs:
        fleet.stop([gfd, upstream])
        fleet.start(gfd)
        fleet.start(upstream)
        time.sleep(spread / len(pairs))
    time.sleep(settle)  # every process's first pass (at start) is long done
    by_side = counts(audit_requests(plane, mark, wall))
    n = len(fleet.side("gfd"))
    for side in SIDES:
        requests, writes = by_side[side]
        figures.rollout[side] = (requests / n, writes / n)


def outage(
    fleet: Fleet, figures: Figures, down: float, after: float, keep: Path | None = None
) -> None:
    plane = fleet.plane
    mark = plane.audit_mark()
    plane.stop_apiserver()
    went = time.monotonic()
    deleted = etcd_delete_prefix(plane, ETCD_PREFIX)
    figures.notes.append(f"outage: {deleted} NodeFeature objects deleted from etcd meanwhile")
    time.sleep(max(0.0, down - (time.monotonic() - went)))
    plane.start_apiserver()
    back_wall, back = time.time(), time.monotonic()
    recovered = fleet.wait_right(back, after)
    remaining = after - (time.monotonic() - back)
    if remaining > 0:
        time.sleep(remaining)
    records = audit_requests(plane, mark, back_wall - down)
    if keep is not None:  # every request of the outage, for a look at who came back when
        keep.mkdir(parents=True, exist_ok=True)
        name = f"outage-{len(figures.outage_recovery.get('gfd', [])) + 1}.json"
        (keep / name).write_text(json.dumps({"back": back_wall, "requests": records}))
    one, five = peaks(records, back_wall, 1.0), peaks(records, back_wall, 5.0)
    spread = peaks(records, back_wall, 1.0, nodes=True)
    for side in SIDES:
        figures.outage_peak.setdefault(side, []).append((one[side], five[side], spread[side]))
        times = [recovered.get(node.name) for node in fleet.side(side)]
        done = [t for t in times if t is not None]
        slowest = max(done) if len(done) == len(times) else float("inf")
        figures.outage_recovery.setdefault(side, []).append(slowest)


def get_loop(plane: ControlPlane, seconds: float) -> tuple[float, float]:
    """Another client: GET one small object in a loop on one connection; p50 and p99 in ms."""
    host, port = plane.url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
    headers = {"Authorization": f"Bearer {controlplane.ADMIN_TOKEN}"}
    latencies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        connection.request("GET", f"/api/v1/namespaces/{GFD_NAMESPACE}", headers=headers)
        connection.getresponse().read()
        latencies.append((time.perf_counter() - started) * 1000)
    connection.close()
    latencies.sort()
    return statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]


def under_load(fleet: Fleet, figures: Figures, seconds: float) -> None:
    fleet.stop(fleet.side("upstream"))
    time.sleep(5)
    figures.latency["gfd fleet only"] = get_loop(fleet.plane, seconds)
    fleet.stop(fleet.side("gfd"))
    for node in fleet.side("upstream"):
        fleet.start(node)
    time.sleep(5)
    figures.latency["upstream fleet only"] = get_loop(fleet.plane, seconds)
    fleet.stop(fleet.side("upstream"))
    time.sleep(2)
    figures.latency["no fleet"] = get_loop(fleet.plane, seconds)


# ----------------------------------------------------------------- the run


def fleet_of(plane: ControlPlane, n: int, workdir: Path, reference: Path) -> Fleet:
    nodes = [Node(side, i, f"fleet-token-{side}-{i:02d}") for side in SIDES for i in range(n)]
    for node in nodes:
        node.kubeconfig = plane.kubeconfig(
            workdir / f"{node.name}.kubeconfig", token=node.token, namespace=GFD_NAMESPACE
        )
        node.log = workdir / f"{node.name}.log"
    return Fleet(plane, nodes, reference, workdir)


def run(args: argparse.Namespace) -> Figures:
    figures = Figures(floor=interpreter_floor_mb())
    server = servers.CURRENT
    with tempfile.TemporaryDirectory(prefix="gfd-fleet-") as tmp:
        workdir = Path(tmp)
        reference = unpack_reference(workdir)
        tokens = [
            (f"fleet-token-{side}-{i:02d}", f"user-fleet-{side}-{i:02d}", GROUP)
            for side in SIDES
            for i in range(args.nodes)
        ]
        with controlplane.running(server, extra_tokens=tokens) as plane:
            grant(plane)
            fleet = fleet_of(plane, args.nodes, workdir, reference)
            for node in fleet.nodes:
                fleet.start(node)
            done = threading.Event()

            def kubelet() -> None:
                while not done.wait(0.5):
                    fleet.supervise()

            threading.Thread(target=kubelet, daemon=True).start()
            try:
                phases(fleet, figures, args)
            finally:
                done.set()
                fleet.stop(fleet.nodes)
                for side in SIDES:
                    crashes = sum(node.crashes for node in fleet.side(side))
                    figures.notes.append(f"{side}: {crashes} process exits restarted (kubelet)")
                if args.keep_logs:
                    for node in fleet.nodes:
                        target = Path(args.keep_logs) / node.log.name
                        target.write_bytes(node.log.read_bytes())
    figures.notes.append(f"kube-apiserver {server.version}; {args.nodes} nodes a side")
    return figures


def phases(fleet: Fleet, figures: Figures, args: argparse.Namespace) -> None:
    say = print if args.verbose else (lambda *a: None)
    deadline = time.monotonic() + 120
    while len(fleet.objects()) < len(fleet.nodes):
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(fleet.objects())} of {len(fleet.nodes)} nodes published")
        time.sleep(0.5)
    time.sleep(10)
    fleet.right = fleet.objects()
    say("published; steady state")
    steady(fleet, figures, args.steady)
    say("repair")
    repair(fleet, figures)
    time.sleep(5)
    say("roll-out")
    rollout(fleet, figures, args.settle, args.spread)
    for repeat in range(args.outages):
        say(f"outage {repeat + 1} of {args.outages}")
        outage(fleet, figures, 30.0, args.after, Path(args.keep_logs) if args.keep_logs else None)
    say("GET loop")
    under_load(fleet, figures, args.loop)


def spread_of(values: list[float] | list[int], form: str) -> str:
    """``median (lowest-highest)`` of repeated figures, each in ``form``."""
    middle = form.format(statistics.median(values))
    return f"{middle} ({form.format(min(values))}-{form.format(max(values))})"


def interpreter_floor_mb() -> float:
    """RSS of this interpreter with only the kubernetes client imported: the least any
    Python process that uses that client can hold, gfd's code and data not yet counted."""
    probe = "import kubernetes, pathlib; print(pathlib.Path('/proc/self/status').read_text())"
    status = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def report(figures: Figures) -> None:
    def row(what: str, gfd: str, upstream: str) -> None:
        print(f"| {what} | {gfd} | {upstream} |")

    print("| figure (per node, 60 s interval) | gfd | upstream GFD v0.20.0 |")
    print("|---|---|---|")
    g, u = figures.steady["gfd"], figures.steady["upstream"]
    row("steady requests / hour", f"{g[0]:.1f}", f"{u[0]:.1f}")
    row("steady writes / hour", f"{g[1]:.1f}", f"{u[1]:.1f}")
    g3, u3 = figures.repair["gfd"], figures.repair["upstream"]
    row(
        "repair of a deleted NodeFeature, s (median / slowest)",
        f"{g3[0]:.1f} / {g3[1]:.1f}" + (f" ({g3[2]} never)" if g3[2] else ""),
        f"{u3[0]:.1f} / {u3[1]:.1f}" + (f" ({u3[2]} never)" if u3[2] else ""),
    )
    g4, u4 = figures.rollout["gfd"], figures.rollout["upstream"]
    row("roll-out: requests / writes", f"{g4[0]:.1f} / {g4[1]:.1f}", f"{u4[0]:.1f} / {u4[1]:.1f}")
    repeats = len(figures.outage_recovery["gfd"])
    for i, what in enumerate(("peak requests in 1 s", "peak requests in 5 s", "nodes in 1 s")):
        row(
            f"after a 30 s outage ({repeats}x): fleet {what}, median (range)",
            *(spread_of([p[i] for p in figures.outage_peak[side]], "{:.0f}") for side in SIDES),
        )
    row(
        f"after a 30 s outage ({repeats}x): s until every object is right, median (range)",
        *(spread_of(figures.outage_recovery[side], "{:.1f}") for side in SIDES),
    )
    row("RSS, MB (median)", f"{figures.rss['gfd']:.1f}", f"{figures.rss['upstream']:.1f}")
    row(
        "RSS floor: the interpreter with the kubernetes client imported, MB",
        f"{figures.floor:.1f}",
        "-",
    )
    row("CPU s / hour (median)", f"{figures.cpu['gfd']:.1f}", f"{figures.cpu['upstream']:.1f}")
    print()
    print("| another client's GET loop | p50 ms | p99 ms |")
    print("|---|---|---|")
    for what, (p50, p99) in figures.latency.items():
        print(f"| {what} | {p50:.2f} | {p99:.2f} |")
    for note in figures.notes:
        print(f"note: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10, help="nodes a side")
    parser.add_argument("--steady", type=float, default=180.0, help="steady window, s")
    parser.add_argument("--settle", type=float, default=30.0, help="roll-out window, s")
    parser.add_argument("--spread", type=float, default=60.0, help="roll-out duration, s")
    parser.add_argument("--after", type=float, default=90.0, help="window after the outage, s")
    parser.add_argument("--outages", type=int, default=3, help="outages, each one measured")
    parser.add_argument("--loop", type=float, default=20.0, help="each GET loop, s")
    parser.add_argument("--keep-logs", default="", help="copy every node's log here")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if not (REFERENCE / "unpack.sh").exists():
        raise SystemExit(f"{REFERENCE} is missing (upstream's binary and the mock NVML)")
    missing = servers.CURRENT.missing()
    if missing:
        raise SystemExit(f"missing {', '.join(missing)} (build: make e2e-tools)")
    report(run(args))


if __name__ == "__main__":
    main()
