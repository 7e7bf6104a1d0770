"""Real GPUs as fixtures: gfd labels each recorded machine's snapshot exactly as upstream
GFD v0.20.0 labelled that machine, for each MIG strategy.

``tests/fixtures/real-gpu/<machine>/`` holds, per machine, ``snapshot.yaml`` (``gfd
--dump-snapshot`` there) and ``upstream-v0.20.0-mig-<strategy>.labels`` (upstream's binary
there, the same moment, ``--no-timestamp``): copies of ``../shared/real-gpu`` kept in the
repository so that CI has them without the shared folder.  Where the shared folder exists,
every machine it holds must be here, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.process import ROOT, run_gfd_here
from tests.upstream import STRATEGIES, differences, read_labels

FIXTURES = Path(ROOT) / "tests" / "fixtures" / "real-gpu"
SHARED = Path(ROOT).parent / "shared" / "real-gpu"
MACHINES = sorted(path.name for path in FIXTURES.iterdir() if path.is_dir())


def test_every_recorded_machine_is_a_fixture() -> None:
    assert {"h100-80gb-hbm3-driver-580.159.04", "h200-driver-580.159.04"} <= set(MACHINES)
    if not SHARED.is_dir():
        pytest.skip(f"no {SHARED} to compare the fixtures with")
    for machine in sorted(path for path in SHARED.iterdir() if path.is_dir()):
        for recorded in sorted(machine.iterdir()):
            copy = FIXTURES / machine.name / recorded.name
            assert copy.is_file(), f"{recorded} is not copied to {copy}"
            assert copy.read_bytes() == recorded.read_bytes(), f"{copy} differs from {recorded}"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("machine", MACHINES)
def test_snapshot_labels_equal_upstream_on_that_machine(
    machine: str, strategy: str, tmp_path: Path
) -> None:
    folder = FIXTURES / machine
    expected = read_labels(folder / f"upstream-v0.20.0-mig-{strategy}.labels")
    output = tmp_path / "labels"
    flags = ["--oneshot", "--no-timestamp", "--use-node-feature-api=false"]
    snapshot = ["--snapshot-file", str(folder / "snapshot.yaml")]
    # in this process: a new interpreter per case would cost more than the labelling
    done = run_gfd_here(*flags, *snapshot, "--mig-strategy", strategy, "--output-file", str(output))
    assert done.returncode == 0, done.stderr
    labels = read_labels(output)
    assert not differences(expected, labels), "\n".join(differences(expected, labels))
    # the comparison covered the GPUs themselves, not only the node-wide labels
    gpus = yaml.safe_load((folder / "snapshot.yaml").read_text())["gpus"]
    assert labels["nvidia.com/gpu.count"] == str(len(gpus)) != "0"
    assert labels["nvidia.com/gpu.product"] == expected["nvidia.com/gpu.product"] != ""
