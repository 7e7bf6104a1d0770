"""Interconnect labels (opt-in, ``--topology-labels``; README "GPU topology").

- ``gpu.interconnect``: ``nvswitch`` when any GPU has a link to an NVSwitch, else ``nvlink``
  when any GPU has an active NVLink, else ``pcie``.
- ``gpu.nvlink.version``, ``gpu.nvlink.links``: each GPU's NVLink generation and number of
  active links, published only when every GPU agrees (the common-label rule); a GPU
  without NVLink says ``0`` links and has no generation.
- ``gpu.nvlink.largest-group``: the most GPUs that reach each other over NVLink (directly
  or through NVSwitches): the largest connected group, ``1`` when there is no NVLink.
- ``gpu.partition-sizes``: the sizes in the partition table, ascending, joined by ``-``
  (``1-2-4-8``); left out when the table is empty.
- ``gpu.numa.nodes`` and ``gpu.numa.gpus-per-node``: how many NUMA nodes hold GPUs and how
  many GPUs each (one number when all agree, else the counts in NUMA-node order joined by
  ``-``); left out unless every GPU's NUMA node is known.
"""

from __future__ import annotations

from collections import Counter

from gfd.labels import keys
from gfd.labels.partitioning import LinkGraph, components
from gfd.partition_table import PartitionTable
from gfd.snapshot import Snapshot


def _agreed(values: list[str]) -> str | None:
    return values[0] if values and all(v == values[0] for v in values) else None


def _largest_group(graph: LinkGraph | None) -> int:
    if graph is None or not graph.minors:
        return 0
    return max(len(group) for group in components(graph))


def topology_labels(
    snapshot: Snapshot, graph: LinkGraph | None, table: PartitionTable
) -> dict[str, str]:
    """The interconnect labels (names without the ``nvidia.com/`` prefix)."""
    topology = snapshot.topology
    if topology is None or not snapshot.gpus:
        return {}
    entries = {entry.index: entry for entry in topology.gpus}
    links = [entries[g.index].nvlinks if g.index in entries else () for g in snapshot.gpus]
    labels: dict[str, str] = {}
    if any(link.remote == "nvswitch" for gpu_links in links for link in gpu_links):
        labels[keys.GPU_INTERCONNECT] = "nvswitch"
    elif any(links):
        labels[keys.GPU_INTERCONNECT] = "nvlink"
    else:
        labels[keys.GPU_INTERCONNECT] = "pcie"
    count = _agreed([str(len(gpu_links)) for gpu_links in links])
    if count is not None:
        labels[keys.GPU_NVLINK_LINKS] = count
    generations = []
    for gpu_links in links:
        versions = {link.version for link in gpu_links}
        generations.append(str(versions.pop()) if len(versions) == 1 else "")
    version = _agreed(generations)
    if version and version != "None":
        labels[keys.GPU_NVLINK_VERSION] = version
    labels[keys.GPU_NVLINK_LARGEST_GROUP] = str(max(_largest_group(graph), 1))
    if table:
        labels[keys.GPU_PARTITION_SIZES] = "-".join(str(size) for size in sorted(table))
    numa = [entries[g.index].numa_node if g.index in entries else None for g in snapshot.gpus]
    if all(node is not None for node in numa):
        per_node = Counter(numa)
        counts = [str(per_node[node]) for node in sorted(per_node, key=lambda n: n or 0)]
        labels[keys.GPU_NUMA_NODES] = str(len(per_node))
        labels[keys.GPU_NUMA_GPUS_PER_NODE] = _agreed(counts) or "-".join(counts)
    return labels
