"""Hostile operator partition tables (config ``partitions:``): every value
Koordinator could not read, or that would not fit a node annotation, is refused when the
file is read, with one line naming the key and at most ~100 characters of the value.
The command line runs in-process (tests/process.py ``run_gfd_here``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gfd import partition_table as partitions
from tests.process import run_gfd_here

SNAPSHOT = Path(__file__).resolve().parent.parent / "examples/snapshots/dgx1-v100-cube-mesh.yaml"
BIG = "9" * 400  # longer numbers are refused by the document reader


def pairs(count: int, link_type: str = "NVLink") -> str:
    return ", ".join(
        f"{{minors: [{i % 8}, {(i + 1) % 8 + 8 * (i // 8)}], gpuLinkType: {link_type}}}"
        for i in range(count)
    )


CASES = [
    # (config text, the key the line must name)
    pytest.param('partitions: {"²": [{minors: [0, 1]}]}', "partitions.²", id="unicode-digit"),
    pytest.param("partitions: {257: []}", "partitions.257", id="size-past-limit"),
    pytest.param(f"partitions: {{2: [{{minors: [0, {BIG}]}}]}}", "minors", id="huge-minor"),
    pytest.param(
        "partitions: {{3: [{{minors: [{}]}}]}}".format(", ".join(map(str, range(50_000)))),
        "partitions.3[0].minors",
        id="fifty-thousand-minors",
    ),
    pytest.param(f"partitions: {{2: [{{minors: [0, 1], allocationScore: {'9' * 400}}}]}}",
                 "allocationScore", id="score-past-go-int"),
    pytest.param(f'partitions: {{2: [{{minors: [0, 1], ringBusBandwidth: "{"9" * 100_000}"}}]}}',
                 "ringBusBandwidth", id="bandwidth-100k-digits"),
    pytest.param("partitions: {2: [{minors: [0, 1], ringBusBandwidth: 20E}]}", "ringBusBandwidth",
                 id="bandwidth-past-int64"),
    pytest.param(f"partitions: {{2: [{{minors: [0, 1], gpuLinkType: {'x' * 100_000}}}]}}",
                 "gpuLinkType", id="link-type-100k"),
    pytest.param('partitions: {2: [{minors: [0, 1], gpuLinkType: "NV Link\\n"}]}', "gpuLinkType",
                 id="link-type-with-space"),
    pytest.param(json.dumps({"partitions": {"2": [{"minors": [0, 1], "k" * 100_000: 1}]}}),
                 "unknown key", id="unknown-key-100k"),
    pytest.param("partitions: {2: [{minors: [0, 1]}, {minors: [1, 0]}]}", "partitions.2[1].minors",
                 id="same-partition-twice"),
    pytest.param("partitions: {{2: [{}]}}".format(pairs(3000, "NVLink" + "x" * 40)), "partitions",
                 id="table-past-64KiB"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "key"), CASES)
def test_hostile_partition_tables_are_one_short_line_exit_2(
    text: str, key: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text + "\n")
    result = run_gfd_here(
        "--dump-partitions", "--snapshot-file", str(SNAPSHOT), "--config-file", str(config)
    )
    assert result.returncode == 2, result.stdout[:300]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[:500]
    assert key in lines[0]
    assert len(lines[0]) < 400
    assert result.stdout == ""


def test_the_largest_computed_table_fits_what_an_override_may_hold() -> None:
    from gfd.labels.partitioning import partition_table
    from tests.test_probe_topology import node

    table = partition_table(node(256, [], switch_links=18), None)
    assert len(partitions.dumps(table)) <= partitions.MAX_TABLE_BYTES
    assert partitions.parse_table(json.loads(partitions.dumps(table)), "partitions") == table


def test_the_largest_joined_table_fits_and_larger_nodes_list_aligned_blocks() -> None:
    """Without NVSwitch every set NVLink joins is listed: at most two fully linked groups
    of 8 on a 16-GPU node, which still fits; a 17th GPU makes the node list only the
    aligned blocks (README "Limits")."""
    from gfd.labels.partitioning import JOINED_GPUS, partition_table
    from tests.test_probe_topology import node

    full = [(a, b) for g in (0, 8) for a in range(g, g + 8) for b in range(a + 1, g + 8)]
    table = partition_table(node(JOINED_GPUS, full), None)
    assert [len(table[size]) for size in (1, 2, 4, 8)] == [16, 2 * 28, 2 * 70, 2]
    assert len(partitions.dumps(table)) <= partitions.MAX_TABLE_BYTES
    bigger = partition_table(node(JOINED_GPUS + 1, full), None)
    assert [len(bigger[size]) for size in (2, 4, 8)] == [8, 4, 2]
    assert all(p.minors[0] % len(p.minors) == 0 for s in (2, 4, 8) for p in bigger[s])


def test_limits_accept_the_edge_values() -> None:
    edge = {"minors": [0, partitions.MAX_INT], "allocationScore": partitions.MAX_INT,
            "ringBusBandwidth": str(partitions.MAX_BANDWIDTH), "gpuLinkType": "NVLink"}  # fmt: skip
    table = partitions.parse_table({"2": [edge]}, "partitions")
    assert table[2][0].allocation_score == partitions.MAX_INT
