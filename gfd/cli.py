"""The ``gfd`` command: command-line options and environment variables into Settings.

The options are generated from ``settings.OPTIONS`` (the one flag/env/config table) and
parsed by click.  Upstream's Go grammar (one dash or two, ``-flag=value`` for a boolean,
Go's boolean words) is rewritten into click's spelling by ``gfd.goflags`` in front of it.
Every usage or config error becomes one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gfd import __version__, dra_source, goflags, logsink, partition_table, signals, snapshot
from gfd.agent import EXIT_RUNTIME, EXIT_USAGE, Agent, AgentExit
from gfd.discovery import read_snapshot
from gfd.echo import bounded_message, clip, describe
from gfd.errors import (
    ConfigError,
    DiscoveryError,
    GfdError,
    NvmlUnavailableError,
    PublishError,
    UsageError,
)
from gfd.kube import secret_files
from gfd.labels import partitioning
from gfd.nodeconfig import NodeLabelReader, choose_for
from gfd.observability import NullMetrics, configure_logging, get_logger
from gfd.options import OPTIONS, Option
from gfd.outputs import make_output
from gfd.outputs.topology_extras import make_topology_outputs
from gfd.settings import Settings, resolve

if TYPE_CHECKING:
    import click

    from gfd.config_choice import ConfigChoice
    from gfd.snapshot import Snapshot

PROG = "gfd"
# click's shell-completion switch for this program name (click.core: _{PROG}_COMPLETE)
_COMPLETE_VAR = f"_{PROG.upper()}_COMPLETE"


def _negated(flag: str) -> str:
    """``--oneshot`` -> ``--no-oneshot``; ``--no-timestamp`` -> ``--timestamp``."""
    bare = flag[2:]
    return "--" + bare[3:] if bare.startswith("no-") else "--no-" + bare


def _click_option(option: Option) -> Any:
    import click

    assert option.flag is not None
    envs = ", ".join(option.envs)
    help_text = f"{option.help} [env: {envs}]" if envs else option.help
    if option.is_bool:
        return click.option(
            f"{option.flag}/{_negated(option.flag)}",
            option.name,
            default=None,
            help=help_text,
        )
    names = [option.flag, *option.aliases] + ([option.short] if option.short else [])
    return click.option(*names, option.name, default=None, type=str, help=help_text)


def _build_command() -> click.Command:
    import click

    @click.command(
        name=PROG,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
        help="GPU feature discovery for Kubernetes: NVML facts into nvidia.com/ node labels.",
    )
    @click.option(
        "--dump-snapshot",
        is_flag=True,
        default=False,
        help="discover once, print the node snapshot (YAML) and exit",
    )
    @click.option(
        "--cleanup",
        is_flag=True,
        default=False,
        help="remove what gfd published for this node with the selected output, and exit",
    )
    @click.option(
        "--dump-partitions",
        is_flag=True,
        default=False,
        help="discover once (or read --snapshot-file), print the GPU partition table as "
        "Koordinator's JSON and exit",
    )
    @click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
    def command(dump_snapshot: bool, cleanup: bool, dump_partitions: bool, **values: Any) -> int:
        return _invoke(
            dump_snapshot=dump_snapshot, cleanup=cleanup, dump_partitions=dump_partitions, **values
        )

    # --help lists the settings in the table's order (README's), then the actions above;
    # click.option appends to a built command's params, so the actions would come first
    actions = list(command.params)
    command.params = []
    for option in OPTIONS:
        if option.flag:
            command = _click_option(option)(command)
    command.params.extend(actions)
    return command


def _invoke(dump_snapshot: bool, cleanup: bool, dump_partitions: bool, **values: Any) -> int:
    """The command's callback: its arguments as click gives them."""
    given = {name: value for name, value in values.items() if value is not None}
    return run(given, dump_snapshot=dump_snapshot, cleanup=cleanup, dump_partitions=dump_partitions)


def _fail(message: str, status: int) -> int:
    import click

    redaction = sys.modules.get("gfd.redaction")
    if redaction is not None:  # else no credential was ever read: nothing to take out
        message = redaction.redact(message)
    # every message clips what it quotes; this holds the whole line, whatever slipped by
    click.echo(f"{PROG}: error: {bounded_message(message)}", err=True)
    return status


def run(
    cli_values: dict[str, Any], *, dump_snapshot: bool, cleanup: bool, dump_partitions: bool = False
) -> int:

    def load(config_choice: ConfigChoice | None = None) -> Settings:
        return resolve(
            cli_values,
            os.environ,
            dump_snapshot=dump_snapshot,
            cleanup=cleanup,
            dump_partitions=dump_partitions,
            config_choice=config_choice,
        )

    try:
        settings = load()
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    configure_logging(settings.log_format, settings.log_level)
    _reclaim_secret_files()
    node_label = None
    if settings.config_file_srcdir and not dump_snapshot:
        chosen = _choose_node_config(settings, load)
        if isinstance(chosen, int):
            return chosen
        settings, node_label = chosen
    for warning in settings.warnings:
        get_logger().warning("config warning", detail=warning)

    preloaded = None
    if settings.snapshot_file:
        try:
            preloaded = snapshot.load(settings.snapshot_file)
        except UsageError as exc:
            return _fail(str(exc), EXIT_USAGE)

    if dump_snapshot or dump_partitions or cleanup:
        return _one_off(settings, preloaded)
    try:
        agent = Agent(settings, load, snapshot=preloaded, node_label=node_label)
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except (GfdError, OSError) as exc:
        return _fail(f"cannot start: {exc}", EXIT_RUNTIME)
    agent.install_signal_handlers()
    try:
        status = agent.run()
    except AgentExit as exc:
        return _fail(exc.message, exc.status)
    if status != 0 and settings.oneshot and agent.last_error:
        return _fail(agent.last_error, status)
    return status


def _reclaim_secret_files() -> None:
    """A gfd killed while it held a client key in a named file (only where no nameless one
    could be made) left it: removed at the next start, before any credential is read."""
    removed = secret_files.reclaim_abandoned()
    if removed:
        get_logger().info("removed the credential folders a stopped gfd left", removed=removed)


def _choose_node_config(
    settings: Settings, load: Callable[[ConfigChoice | None], Settings]
) -> tuple[Settings, Any] | int:
    """The node's entry of --config-file-srcdir, chosen before anything else as upstream's
    config-manager init container does (it may select the output, the MIG strategy, ...):
    the settings with it and the node label reader, or the exit status."""

    try:
        node_label = NodeLabelReader(settings)
        choice = choose_for(settings, node_label())
        settings = load(choice)
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except PublishError as exc:
        return _fail(f"cannot choose the node's config: {exc}", EXIT_RUNTIME)
    get_logger().info(
        "node config chosen", entry=choice.entry, reason=choice.reason, path=settings.config_file
    )
    return settings, node_label


def _one_off(settings: Settings, preloaded: Snapshot | None) -> int:
    """--dump-snapshot, --dump-partitions or --cleanup: one action, then exit."""

    # a one-off action: SIGHUP changes nothing, a stop cuts its API work short
    signals.attach(signals.ignore_reload)
    if settings.dump_snapshot:
        return _dump_snapshot(settings, preloaded)
    if settings.dump_partitions:
        return _dump_partitions(settings, preloaded)
    return _cleanup(settings)


def _read_once(settings: Settings) -> Snapshot:
    """The node's snapshot for a dump: its ResourceSlices under ``dra``, else the host."""
    if settings.device_discovery_strategy == "dra":
        return dra_source.read(settings)
    return read_snapshot(settings, first_pass=True, metrics=NullMetrics())


def _dump_snapshot(settings: Settings, preloaded: Snapshot | None) -> int:

    found = preloaded
    try:
        if found is None:
            found = _read_once(settings)
    except (NvmlUnavailableError, DiscoveryError) as exc:
        return _fail(str(exc), EXIT_RUNTIME)
    problem = write_stdout(snapshot.dumps(found))
    if problem:
        return _fail(f"cannot write the snapshot to stdout: {problem}", EXIT_RUNTIME)
    return 0


def _dump_partitions(settings: Settings, preloaded: Snapshot | None) -> int:

    found = preloaded
    try:
        if found is None:
            found = _read_once(settings)
        table = partitioning.partition_table(found, settings.config.partitions)
    except (NvmlUnavailableError, DiscoveryError) as exc:
        return _fail(str(exc), EXIT_RUNTIME)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if found.topology is None and settings.config.partitions is None:
        get_logger().warning("the snapshot has no topology section; the table is empty")
    problem = write_stdout(partition_table.dumps(table, pretty=True) + "\n")
    if problem:
        return _fail(f"cannot write the partition table to stdout: {problem}", EXIT_RUNTIME)
    return 0


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null, so that the interpreter's flush of what is still buffered
    at exit cannot fail again (and print a traceback-like "Exception ignored" report)."""
    stream = sys.stdout
    if stream is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):
        pass


def write_stdout(text: str) -> str | None:
    """Write and flush ``text`` to stdout; None when done, else why not (stdout closed,
    ``/dev/full``, a closed pipe)."""
    stream = sys.stdout
    if stream is None:
        return "stdout is closed"
    try:
        stream.write(text)
        stream.flush()
    except OSError as exc:
        _silence_stdout()
        return exc.strerror or str(exc)
    except UnicodeEncodeError as exc:
        # PYTHONIOENCODING or a C locale chose an encoding the text does not fit: the
        # stream is named, the text (a node's data) is not echoed
        _silence_stdout()
        return f"its encoding {describe(exc.encoding)} cannot represent the text (use UTF-8)"
    return None


def _settle_stdout(status: int) -> int:
    """Flush stdout before exit; a failure is one line and status 1, never a traceback."""
    if sys.stdout is None:
        return status  # nothing was written to it, or the writer already said so
    problem = write_stdout("")
    if problem and status == 0:
        return _fail(f"cannot write to stdout: {problem}", 1)
    return status


def _cleanup(settings: Settings) -> int:

    try:
        output = make_output(settings)
        output.cleanup()
        extras = make_topology_outputs(settings, cleanup=True)
        if extras is not None:
            extras.cleanup()
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except PublishError as exc:
        return _fail(str(exc), EXIT_RUNTIME)
    get_logger(output=output.kind, node=settings.node_name).info("cleanup done")
    return 0


def main(argv: Sequence[str] | None = None) -> None:

    # before anything is opened (a closed fd 2 is taken by /dev/null) or written: from here
    # on, stderr can neither block gfd nor kill it
    logsink.install()
    args = list(sys.argv[1:] if argv is None else argv)
    import click

    command = _build_command()
    if not os.environ.get(_COMPLETE_VAR):  # completion: click reads the words as typed
        try:
            args = goflags.to_click(args, command.params)
        except UsageError as exc:
            sys.exit(_fail(str(exc), 2))
    try:
        status = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except OSError as exc:  # --help or --version into a closed pipe or /dev/full
        _silence_stdout()
        sys.exit(_fail(f"cannot write to stdout: {exc.strerror or exc}", 1))
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.format_message(), err=True)
        sys.exit(2)
    except click.UsageError as exc:
        # click quotes the offending argument whole: clip it like every other value
        message = clip(exc.format_message().splitlines()[0], 300)
        if isinstance(exc, click.NoSuchOption):
            message += f" ({PROG} --help lists the options)"
        sys.exit(_fail(message, 2))
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        sys.exit(_fail(clip(exc.format_message(), 300), exc.exit_code))
    # --help and --version return None after printing
    sys.exit(_settle_stdout(status if isinstance(status, int) else 0))
