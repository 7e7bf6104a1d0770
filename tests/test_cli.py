"""The gfd command: oneshot output, and one clear line + exit 2 on bad input.

Most runs call the command line in-process (tests/process.py: run_gfd_here, the same
``main`` with the same environment); a few run it as a real process, for the interpreter's
start-up, byte-identical output across processes, and the exit statuses 1 and 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.process import run_gfd, run_gfd_here

DGX = "examples/snapshots/dgx-a100.yaml"
DGX_LABELS = """\
nvidia.com/cuda.driver-version.full=550.54.15
nvidia.com/cuda.driver-version.major=550
nvidia.com/cuda.driver-version.minor=54
nvidia.com/cuda.driver-version.revision=15
nvidia.com/cuda.driver.major=550
nvidia.com/cuda.driver.minor=54
nvidia.com/cuda.driver.rev=15
nvidia.com/cuda.runtime-version.full=12.4
nvidia.com/cuda.runtime-version.major=12
nvidia.com/cuda.runtime-version.minor=4
nvidia.com/cuda.runtime.major=12
nvidia.com/cuda.runtime.minor=4
nvidia.com/gpu.compute.major=8
nvidia.com/gpu.compute.minor=0
nvidia.com/gpu.count=8
nvidia.com/gpu.family=ampere
nvidia.com/gpu.machine=DGXA100-920-23687-2530-000
nvidia.com/gpu.memory=40960
nvidia.com/gpu.mode=compute
nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB
nvidia.com/gpu.replicas=1
nvidia.com/gpu.sharing-strategy=none
nvidia.com/mig.capable=true
nvidia.com/mps.capable=false
nvidia.com/vgpu.present=false
"""


def test_oneshot_prints_upstreams_25_labels_for_a_dgx_a100() -> None:
    result = run_gfd("--oneshot", "--no-timestamp", "--snapshot-file", DGX)
    assert result.returncode == 0, result.stderr
    assert result.stdout == DGX_LABELS
    assert len(result.stdout.splitlines()) == 25


def test_timestamp_label_is_present_by_default() -> None:
    result = run_gfd_here("--oneshot", "--snapshot-file", DGX)
    assert result.returncode == 0
    stamps = [line for line in result.stdout.splitlines() if "gfd.timestamp=" in line]
    assert len(stamps) == 1 and stamps[0].split("=")[1].isdigit()


def test_seed_example_end_to_end() -> None:
    result = run_gfd_here(
        "--oneshot", "--no-timestamp", "--config-file", "examples/configs/renaming.yaml",
        "--snapshot-file", "examples/snapshots/dgx-a100-mig-mixed.yaml",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    labels = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert labels["nvidia.com/a100.count"] == "8"
    assert labels["nvidia.com/mig-small.count"] == "56"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert not any(key.startswith("nvidia.com/gpu.") for key in labels)


def test_two_models_are_byte_identical_across_runs() -> None:
    args = ("--oneshot", "--no-timestamp", "--snapshot-file", "examples/snapshots/two-models.yaml")
    first, second = run_gfd(*args), run_gfd(*args)
    assert first.returncode == 0 and first.stdout == second.stdout
    assert "nvidia.com/gpu.count=8\n" in first.stdout
    for absent in ("gpu.product=", "gpu.memory=", "gpu.family=", "gpu.compute.major="):
        assert absent not in first.stdout


def test_output_file_and_env_selection(tmp_path: Path) -> None:
    out = tmp_path / "labels"
    result = run_gfd_here(
        "--no-timestamp", "--snapshot-file", DGX,
        env={"GFD_ONESHOT": "yes", "GFD_OUTPUT_FILE": str(out)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert out.read_text() == DGX_LABELS
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_upstream_style_boolean_flag_values() -> None:
    result = run_gfd_here("--oneshot=true", "--no-timestamp=true", "--snapshot-file", DGX)
    assert result.returncode == 0 and result.stdout == DGX_LABELS


def test_one_dash_long_flags_are_upstreams_not_short_options(tmp_path: Path) -> None:
    """Go's flag package: ``-oneshot`` is --oneshot, never ``-o neshot`` (a daemon writing
    ./neshot); ``-mig-strategy=mixed`` is --mig-strategy=mixed."""
    import subprocess

    from tests.process import GFD, clean_env

    args = ["-oneshot", "-no-timestamp", "-mig-strategy=mixed", "-snapshot-file", DGX]
    result = subprocess.run(
        [*GFD, *[str(Path(arg).resolve()) if arg == DGX else arg for arg in args]],
        capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/mig.strategy=mixed\n" in result.stdout
    assert "gfd.timestamp" not in result.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--oneshot=T", "--no-timestamp=1"], {}),
        (["-oneshot=TRUE", "-no-timestamp=True"], {}),
        ([], {"GFD_ONESHOT": "1", "GFD_NO_TIMESTAMP": "t"}),
        (["--no-timestamp"], {"GFD_ONESHOT": "True"}),
        (["--oneshot", "--timestamp=false"], {}),  # gfd's own negation, with a value
        # urfave/cli's help and version flags are booleans too: =false asks for nothing
        (["-oneshot", "-no-timestamp", "-h=false", "-help=0", "-v=F"], {}),
    ],
)
def test_gos_boolean_words_in_flags_and_variables(args: list[str], env: dict[str, str]) -> None:
    result = run_gfd_here(*args, "--snapshot-file", DGX, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == DGX_LABELS


@pytest.mark.parametrize(("args", "named"), [
    (["-oneshot", "false"], "-oneshot false: a boolean flag takes its value as -oneshot=false"),
    (["-ofile"], "no such option: -ofile"),
    (["---oneshot"], "bad flag syntax: ---oneshot"),
    (["-o", "a", "--output-file", "b"], "cannot use two forms of the same flag: -o and"),
    (["-oneshot=tRuE"], "-oneshot 'tRuE'"),
    (["--mig-strategy=MIXED"], "--mig-strategy 'MIXED'"),
    (["-v=maybe"], "-v 'maybe'"),
    (["-h=tRuE"], "-h 'tRuE'"),
])  # fmt: skip
def test_what_upstreams_grammar_refuses_is_refused(args: list[str], named: str) -> None:
    result = run_gfd_here(*args, env={"GFD_SNAPSHOT_FILE": DGX})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr


def test_version_and_help() -> None:
    version = run_gfd("--version")
    assert version.returncode == 0 and version.stdout.startswith("gfd ")
    help_text = run_gfd("--help")
    assert help_text.returncode == 0
    for flag in ("--mig-strategy", "--sleep-interval", "--use-node-labels", "GFD_ONESHOT"):
        assert flag in help_text.stdout
    for asked in (["-h=1"], ["-help=T"], ["--help=true"]):  # Go's words, as upstream takes
        assert run_gfd_here(*asked).stdout == help_text.stdout, asked
    assert run_gfd_here("-v=true").stdout == version.stdout


def _bad_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


BAD_INPUTS = [
    (["--mig-strategy", "bogus"], {}, "--mig-strategy 'bogus'"),
    ([], {"GFD_FAIL_ON_INIT_ERROR": "perhaps"}, "GFD_FAIL_ON_INIT_ERROR='perhaps'"),
    (["--sleep-interval", "10 minutes"], {}, "--sleep-interval '10 minutes'"),
    ([], {"GFD_SLEEP_INTERVAL": "-1s"}, "GFD_SLEEP_INTERVAL='-1s'"),
    (["--config-file", "{cfg:version: v9\n}"], {}, "unsupported config version 'v9'"),
    (["--config-file", "{cfg:flags: [oops\n}"], {}, "not valid YAML"),
    (
        [
            "--config-file",
            "{cfg:sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1}\n}",
        ],
        {},
        "replicas: must be at least 2, got 1",
    ),
    (["--config-file", "{cfg:resources:\n  gpus:\n  - {pattern: '*', name: Not_Valid}\n}"], {},
     "resources.gpus[0].name: invalid resource name 'Not_Valid'"),
    (["--use-node-feature-api", "--use-node-labels", "--node-name", "n"], {}, "choose at most one"),
    (["--use-node-labels"], {}, "--node-name"),
    (["--snapshot-file", "{snap:version: v1\ngpus: 3\n}"], {}, "gpus: expected a list, got 3"),
    (["--snapshot-file", "/does/not/exist.yaml"], {}, "--snapshot-file: cannot read"),
    (["--no-such-flag"], {}, "No such option"),
    (["--oneshot=sometimes"], {}, "--oneshot 'sometimes'"),
    # a host the socket layer cannot even encode, or a port of other digits than ASCII's
    (["--metrics-address", "\u202eevil:9400"], {}, "--metrics-address '\\u202eevil:9400'"),
    ([], {"GFD_METRICS_ADDRESS": "a b:9400"}, "GFD_METRICS_ADDRESS='a b:9400'"),
    (["--metrics-address", ":\uff19\uff14"], {}, "--metrics-address ':\uff19\uff14'"),
    (["--config-file", '{cfg:flags:\n  gfd:\n    metricsAddress: "h\u00e9:1"\n}'], {},
     "flags.gfd.metricsAddress: 'h\u00e9:1'"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "env", "message"), BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    resolved = []
    for arg in args:
        if arg.startswith("{cfg:") or arg.startswith("{snap:"):
            name = "config.yaml" if arg.startswith("{cfg:") else "snapshot.yaml"
            path = tmp_path / name
            path.write_text(arg.split(":", 1)[1][:-1])
            resolved.append(str(path))
        else:
            resolved.append(arg)
    out = tmp_path / "published"
    out.write_text("previous labels\n")
    result = run_gfd_here(
        "--oneshot", "--output-file", str(out), *resolved, env={"GFD_SNAPSHOT_FILE": DGX, **env}
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr
    assert out.read_text() == "previous labels\n"  # nothing already published is touched


def test_mps_with_mig_enabled_gpus_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "mps.yaml"
    config.write_text("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n")
    result = run_gfd(
        "--oneshot", "--snapshot-file", "examples/snapshots/dgx-a100-mig-mixed.yaml",
        "--config-file", str(config),
    )  # fmt: skip
    assert result.returncode == 2
    assert "MPS sharing is not supported for MIG devices" in result.stderr
    assert result.stdout == ""


def test_malformed_driver_version_fails_oneshot_with_status_1(tmp_path: Path) -> None:
    text = Path(DGX).read_text().replace("version: 550.54.15", "version: bad-version")
    snapshot = tmp_path / "s.yaml"
    snapshot.write_text(text)
    result = run_gfd("--oneshot", "--snapshot-file", str(snapshot))
    assert result.returncode == 1
    assert "driver version" in result.stderr
    assert result.stdout == ""
