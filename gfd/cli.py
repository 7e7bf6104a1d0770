"""The ``gfd`` command: command-line options and environment variables into Settings.

The options are generated from ``settings.OPTIONS`` (the one flag/env/config table).  Every
usage or config error becomes one line on stderr and exit status 2, never a traceback.

click is imported only when it has work to do: a command line made of nothing but the
command's own long options (every oneshot and every daemon start) is read by
``_parse_plain``, which gives the callback exactly what click would give it (a test checks
the two against each other); help, version, short options, shell completion and every
error go to click, so their output is click's.  Importing and building click was about a
sixth of a oneshot's start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gfd import __version__
from gfd.echo import bounded_message, clip, describe
from gfd.errors import GfdError, UsageError
from gfd.settings import OPTIONS, Option, Settings, parse_bool, resolve

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


def _normalise_bool_args(args: Sequence[str]) -> list[str]:
    """Accept upstream's ``--flag=true|false`` form for boolean flags."""
    bool_flags = {option.flag: option for option in OPTIONS if option.is_bool and option.flag}
    result: list[str] = []
    for arg in args:
        if arg == "--":
            result.extend(args[len(result) :])
            break
        flag, sep, raw = arg.partition("=")
        option = bool_flags.get(flag)
        if option is None or not sep:
            result.append(arg)
            continue
        try:
            value = parse_bool(raw)
        except ValueError as exc:
            raise UsageError(f"{flag} {describe(raw)}: {exc}") from None
        assert option.flag is not None
        result.append(option.flag if value else _negated(option.flag))
    return result


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
    """The command's callback: its arguments as click (or ``_parse_plain``) gives them."""
    given = {name: value for name, value in values.items() if value is not None}
    return run(given, dump_snapshot=dump_snapshot, cleanup=cleanup, dump_partitions=dump_partitions)


# The command's own flags that are not settings (see _build_command); all default to False.
_ACTION_FLAGS = {
    "--dump-snapshot": "dump_snapshot",
    "--cleanup": "cleanup",
    "--dump-partitions": "dump_partitions",
}
_TAKES_VALUE = object()


def _plain_flags() -> dict[str, tuple[str, Any]]:
    """Every long option of the command: flag -> (callback argument, value it sets)."""
    flags: dict[str, tuple[str, Any]] = {flag: (name, True) for flag, name in _ACTION_FLAGS.items()}
    for option in OPTIONS:
        if not option.flag:
            continue
        if option.is_bool:
            flags[option.flag] = (option.name, True)
            flags[_negated(option.flag)] = (option.name, False)
        else:
            for name in (option.flag, *option.aliases):
                flags[name] = (option.name, _TAKES_VALUE)
    return flags


def _parse_plain(args: Sequence[str]) -> dict[str, Any] | None:
    """The callback's arguments for a command line of long options only, as click would
    pass them (last one wins; a value is the attached ``=`` part or the next word, whatever
    it looks like); None for anything else -- help, version, short options, positional
    words, ``--``, an unknown option, a missing value, shell completion -- which click
    then reads, so that every message stays click's."""
    if os.environ.get(_COMPLETE_VAR):
        return None
    flags = _plain_flags()
    values: dict[str, Any] = {name: False for name in _ACTION_FLAGS.values()}
    values.update((option.name, None) for option in OPTIONS if option.flag)
    position = 0
    while position < len(args):
        flag, sep, attached = args[position].partition("=")
        position += 1
        known = flags.get(flag)
        if known is None:
            return None
        name, value = known
        if value is _TAKES_VALUE:
            if sep:
                value = attached
            elif position < len(args):
                value = args[position]
                position += 1
            else:
                return None
        elif sep:
            return None
        values[name] = value
    return values


def _run_plain(values: dict[str, Any]) -> int:
    """The callback outside click, with what click's ``main`` does around it."""
    try:
        return _invoke(**values)
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\n")  # click: the blank line closes the terminal's ^C echo
        sys.stderr.flush()
        return 130
    except OSError as exc:
        import errno

        if exc.errno != errno.EPIPE:
            raise
        # click: a closed stdout (gfd | head) ends the run quietly with status 1
        sys.stdout = _QuietFlush(sys.stdout)
        sys.stderr = _QuietFlush(sys.stderr)
        return 1


class _QuietFlush:
    """A stream whose flush ignores a closed pipe (click's wrapper after EPIPE)."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def flush(self) -> None:
        import errno

        try:
            self._wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._wrapped, attr)


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
    from gfd.agent import EXIT_RUNTIME, EXIT_USAGE, Agent, AgentExit
    from gfd.observability import configure_logging, get_logger

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
    log = get_logger()
    node_label = None
    if settings.config_file_srcdir and not dump_snapshot:
        # the node's entry is chosen before anything else, as upstream's config-manager
        # init container does: it may select the output, the MIG strategy, ...
        from gfd.errors import PublishError
        from gfd.nodeconfig import NodeLabelReader, choose_for

        try:
            node_label = NodeLabelReader(settings)
            choice = choose_for(settings, node_label())
            settings = load(choice)
        except UsageError as exc:
            return _fail(str(exc), EXIT_USAGE)
        except PublishError as exc:
            return _fail(f"cannot choose the node's config: {exc}", EXIT_RUNTIME)
        log.info(
            "node config chosen",
            entry=choice.entry,
            reason=choice.reason,
            path=settings.config_file,
        )
    for warning in settings.warnings:
        log.warning("config warning", detail=warning)

    preloaded = None
    if settings.snapshot_file:
        from gfd import snapshot

        try:
            preloaded = snapshot.load(settings.snapshot_file)
        except UsageError as exc:
            return _fail(str(exc), EXIT_USAGE)

    if dump_snapshot or dump_partitions or cleanup:
        from gfd import signals

        # a one-off action: SIGHUP changes nothing, a stop cuts its API work short
        signals.attach(signals.ignore_reload)
    if dump_snapshot:
        return _dump_snapshot(settings, preloaded)
    if dump_partitions:
        return _dump_partitions(settings, preloaded)
    if cleanup:
        return _cleanup(settings)

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


def _dump_snapshot(settings: Settings, preloaded: Snapshot | None) -> int:
    from gfd import snapshot
    from gfd.agent import EXIT_RUNTIME
    from gfd.errors import DiscoveryError, NvmlUnavailableError
    from gfd.observability import NullMetrics

    found = preloaded
    try:
        if found is None:
            from gfd.discovery import read_snapshot  # not on the --snapshot-file path

            found = read_snapshot(settings, first_pass=True, metrics=NullMetrics())
    except (NvmlUnavailableError, DiscoveryError) as exc:
        return _fail(str(exc), EXIT_RUNTIME)
    problem = write_stdout(snapshot.dumps(found))
    if problem:
        return _fail(f"cannot write the snapshot to stdout: {problem}", EXIT_RUNTIME)
    return 0


def _dump_partitions(settings: Settings, preloaded: Snapshot | None) -> int:
    from gfd import partition_table as partitions
    from gfd.agent import EXIT_RUNTIME, EXIT_USAGE
    from gfd.errors import ConfigError, DiscoveryError, NvmlUnavailableError
    from gfd.labels.partitioning import partition_table
    from gfd.observability import NullMetrics, get_logger

    found = preloaded
    try:
        if found is None:
            from gfd.discovery import read_snapshot  # not on the --snapshot-file path

            found = read_snapshot(settings, first_pass=True, metrics=NullMetrics())
        table = partition_table(found, settings.config.partitions)
    except (NvmlUnavailableError, DiscoveryError) as exc:
        return _fail(str(exc), EXIT_RUNTIME)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if found.topology is None and settings.config.partitions is None:
        get_logger().warning("the snapshot has no topology section; the table is empty")
    sys.stdout.write(partitions.dumps(table, pretty=True) + "\n")
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
    from gfd.agent import EXIT_RUNTIME, EXIT_USAGE
    from gfd.errors import PublishError
    from gfd.observability import get_logger
    from gfd.outputs import make_output
    from gfd.outputs.topology_extras import make_topology_outputs

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
    from gfd import logsink

    # before anything is opened (a closed fd 2 is taken by /dev/null) or written: from here
    # on, stderr can neither block gfd nor kill it
    logsink.install()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _normalise_bool_args(args)
    except UsageError as exc:
        sys.exit(_fail(str(exc), 2))
    plain = _parse_plain(args)
    if plain is not None:
        sys.exit(_run_plain(plain))
    import click

    command = _build_command()
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
