"""The daemon loop (SPEC §7): discover → label → publish-if-changed → wait, with signals.

A runtime fault (NVML error, unreadable snapshot, disk full, API server down) fails one
pass: it is logged and counted, the last published labels stay, and the next pass retries.
Bad settings stop the agent at start (exit 2); on SIGHUP they are reported and the settings
in force stay.  A reload that moves the output publishes to the new place first and only
then retires the old one, with the outputs' own cleanup (what ``--cleanup`` runs), so the
node always holds its labels somewhere (README "Switching output by reload").
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gfd import dra_source, interrupt, signals
from gfd import labels as labelling
from gfd.discovery import read_snapshot
from gfd.echo import error_text
from gfd.errors import (
    ConfigError,
    DiscoveryError,
    GfdError,
    LabelError,
    NvmlUnavailableError,
    PublishError,
    SnapshotError,
    UsageError,
)
from gfd.files import real_path_or_same
from gfd.nodeconfig import NodeConfigError, NodeLabelReader, choose_for
from gfd.observability import Metrics, get_logger, restart_coalescing, start_metrics
from gfd.output_kinds import output_identity, output_place
from gfd.outputs import Output, make_output
from gfd.outputs.topology_extras import make_topology_outputs
from gfd.settings import Settings, capped_warnings
from gfd.snapshot import Snapshot

if TYPE_CHECKING:
    from gfd.config_choice import ConfigChoice

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


class AgentExit(Exception):
    """Stop the agent with ``status``; ``message`` is the one line for stderr."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


#: where a pass gets the node's snapshot: (settings, first_pass=, metrics=) -> Snapshot
SnapshotSource = Callable[..., Snapshot]


def _read_snapshot(settings: Settings, *, first_pass: bool, metrics: Metrics) -> Snapshot:
    """The default snapshot source; discovery is imported on the first pass that needs it
    (a oneshot over a ``--snapshot-file`` the CLI already read never imports it)."""
    if settings.device_discovery_strategy == "dra" and not settings.snapshot_file:
        return dra_source.read(settings)
    snapshot = read_snapshot(settings, first_pass=first_pass, metrics=metrics)
    if settings.dra_drift_check and not settings.snapshot_file:
        dra_source.check_drift(settings, snapshot, metrics)
    return snapshot


class _Signals:
    """What the signal handlers and the watches asked for (set in a handler or another
    thread: plain attributes, no lock)."""

    __slots__ = ("changed", "name", "reload", "repair", "stop")

    def __init__(self) -> None:
        self.stop = False
        self.reload = False
        self.name = ""
        # a watch saw the published object undone: check it now, not at the verify interval
        self.repair = False
        # a watch saw something the loop follows change (the node's config label)
        self.changed = False


class _Retiree:
    """A place the settings in force no longer publish to, and what removes it."""

    __slots__ = ("cleanup", "kind")

    def __init__(self, kind: str, cleanup: Callable[[], None]) -> None:
        self.kind = kind
        self.cleanup = cleanup


class Agent:
    #: the config entries last reported as applying to nothing: said again only on a change
    _unused_reported: tuple[str, ...] = ()

    def __init__(
        self,
        settings: Settings,
        reload_settings: Callable[..., Settings],
        clock: Callable[[], float] = time.time,
        snapshot: Snapshot | None = None,
        *,
        read_snapshot: SnapshotSource = _read_snapshot,
        output: Output | None = None,
        build_output: Callable[[Settings], Output] = make_output,
        metrics: Metrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wait: Callable[[float | None], object] | None = None,
        node_label: Callable[[], str | None] | None = None,
    ) -> None:
        """The agent's collaborators are handed in; each defaults to the real one.

        ``snapshot``: the ``--snapshot-file`` document the CLI already read and checked,
        used for the first pass instead of reading it again.  ``read_snapshot``: where every
        other pass gets the node.  ``output``: where labels go (default: the one the settings
        select); ``build_output`` builds the next one when a reload changes it.
        ``metrics``: what passes are reported to (default: as ``--metrics-address`` says).
        ``clock``: the run's timestamp; ``monotonic``: pass durations and verification.
        ``wait(interval)``: sleeps between passes (None: forever); it must return early
        when :meth:`request_stop` or :meth:`request_reload` is called.  The default also
        returns when a watch of what the API outputs publish sees it undone; a wait handed
        in stands for that whole machinery, so no watch runs with it.
        ``node_label()``: the value of this node's config label (``--config-file-srcdir``:
        read before each pass; default: one GET of the Node).  ``reload_settings`` is then
        called with ``config_choice=``, the entry to load."""
        self.settings = settings
        self._reload_settings = reload_settings
        self._clock = clock
        self._monotonic = monotonic
        self._preloaded = snapshot
        self._read_snapshot = read_snapshot
        self._build_output = build_output
        self._signals = _Signals()
        self._wake = interrupt.Wakeup()  # set from signal handlers: takes no lock
        self._sleep = self._sleep_until_woken if wait is None else wait
        self._watching = wait is None
        self.metrics: Metrics = start_metrics(settings) if metrics is None else metrics
        self.output: Output = build_output(settings) if output is None else output
        self.topology_outputs = make_topology_outputs(settings)  # besides the labels; or None
        # what was in force before the last reload, until the reloaded settings proved good
        self._previous: tuple[Settings, Output] | None = None
        # places a reload moved away from, removed once the new settings have published
        self._retiring: dict[tuple[object, ...], _Retiree] = {}
        self._started = False  # becomes True after the process's first pass
        self._loss_seen = False  # the previous discovery already found a GPU lost
        self._node_label = node_label
        # what the node label asked for that could not be applied (an error message, or the
        # refused entry): reported once, not retried until the label or a SIGHUP changes it
        self._refused: str | None = None
        self.last_error: str | None = None
        self._new_run()

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            self.request_reload()
        else:
            self.request_stop(signal.Signals(signum).name)
            # cut an API request or a wait between retries short (raises there)
            interrupt.request_stop(self._signals.name)

    def request_reload(self) -> None:
        """What SIGHUP does: reload the settings after the current pass or wait."""
        self._signals.reload = True
        self._wake.set()

    def request_stop(self, name: str) -> None:
        """What SIGTERM/SIGINT/SIGQUIT do: run the output's on_exit and return 0."""
        self._signals.stop = True
        self._signals.name = name
        self._wake.set()

    def _undone(self) -> None:
        """A watch's thread saw a change that undoes what was published: run a pass now,
        which checks the destination and publishes again."""
        self._signals.repair = True
        self._signals.changed = True
        self._wake.set()

    def _node_changed(self) -> None:
        """A watch's thread saw what a pass reads change (the node's config label, its
        ResourceSlices): run a pass now."""
        self._signals.changed = True
        self._wake.set()

    def _follow_slices(self) -> None:
        """Watch this node's ResourceSlices while the settings read them (a daemon only)."""
        if self._watching and not self.settings.oneshot and self._read_snapshot is _read_snapshot:
            dra_source.follow(self.settings, self._node_changed)

    def _watch(self, output: object, wake: Callable[[], None] | None = None) -> None:
        """Let an API output watch what it publishes, or the node label's reader what it
        reads (``wake``); a daemon only: a oneshot ends first."""
        start = getattr(output, "watch", None)
        if start is not None and self._watching and not self.settings.oneshot:
            start(wake or self._undone)

    @staticmethod
    def _unwatch(output: object) -> None:
        stop = getattr(output, "unwatch", None)
        if stop is not None:
            stop()

    def install_signal_handlers(self) -> None:
        """Take the process's signals over from start-up (a SIGHUP that came while gfd was
        starting is a reload after the first pass: see gfd.signals)."""
        signals.attach(self._on_signal)

    # ------------------------------------------------------------------ one run

    def _new_run(self) -> None:
        self.timestamp = int(self._clock())
        self.published: dict[str, str] | None = None
        self._last_check = 0.0
        self._first_pass = True
        self.log = get_logger(node=self.settings.node_name, output=self.output.kind)

    def _report_unused(self, unused: tuple[str, ...]) -> None:
        """Config entries that apply to nothing: warned when the set changes, not each pass."""
        if unused != self._unused_reported:
            self._unused_reported = unused
            for warning in capped_warnings(unused):
                self.log.warning("config applies to nothing", detail=warning)

    def run_pass(self) -> bool:
        """One pass; True when the destination now holds the current labels."""
        started = self._monotonic()
        self.metrics.pass_started()
        try:
            label_count, changed = self._labels_and_publish()
        except (SnapshotError, ConfigError) as exc:
            if not self._started:
                # bad input at start: one line on stderr (by the CLI) and exit 2, nothing else
                raise AgentExit(EXIT_USAGE, str(exc)) from None
            first_of_run = self._first_pass
            self._fail_pass(started, exc)
            if first_of_run and self._previous and isinstance(exc, ConfigError):
                self._revert()
            return False
        except (DiscoveryError, LabelError, PublishError, OSError) as exc:
            self._fail_pass(started, exc)
            return False
        except NvmlUnavailableError as exc:
            # only raised when --fail-on-init-error applies to this first pass: exit 1
            self._fail_pass(started, None)
            raise AgentExit(EXIT_RUNTIME, str(exc)) from None
        except Exception as exc:  # the loop boundary: never die of one bad pass
            self._fail_pass(started, exc, unexpected=True)
            return False
        duration = self._monotonic() - started
        self.metrics.pass_finished("success", duration, label_count)
        # a oneshot run's output is its labels; its pass record is detail (--log-level debug)
        record = self.log.debug if self.settings.oneshot else self.log.info
        record(
            "pass finished",
            duration_seconds=round(duration, 6),
            labels=label_count,
            changed=changed,
        )
        self._first_pass = False
        self._started = True
        return True

    def _labels_and_publish(self) -> tuple[int, bool]:
        """The pass's work: read the snapshot, build the labels, publish them (and the
        topology outputs); (how many labels, whether the destination changed)."""
        snapshot, self._preloaded = self._preloaded, None
        if snapshot is None:
            snapshot = self._read_snapshot(
                self.settings, first_pass=self._first_pass, metrics=self.metrics
            )
            if not self.settings.snapshot_file:
                self._confirm_loss(snapshot)
        result = labelling.build(
            snapshot,
            self.settings.mig_strategy,
            self.settings.config,
            None if self.settings.no_timestamp else self.timestamp,
            topology_labels=self.settings.topology_labels,
        )
        for warning in capped_warnings(result.warnings):
            self.log.warning("label warning", detail=warning)
        for note in result.notes:
            self.log.debug("label note", detail=note)
        self._report_unused(result.unused)
        label_count = len(result.labels)
        if self.output.offer(snapshot):
            self.published = None  # what it carries besides the labels changed
        changed = self._publish(result.labels)
        if self.topology_outputs is not None:
            self.topology_outputs.publish(snapshot, self.settings.config.partitions)
        if self._retiring:
            self._retire()
        return label_count, changed

    def _confirm_loss(self, snapshot: Snapshot) -> None:
        """A lost GPU is labelled only when two discoveries in a row find it lost: the
        first one fails the pass, so the last labels stay (SPEC §7) and a transient
        error never flaps them.  (A --snapshot-file is a record, labelled as it says.)"""
        seen_before, self._loss_seen = self._loss_seen, bool(snapshot.lost)
        if snapshot.lost and not seen_before:
            reasons = "; ".join(gone.reason[:200] for gone in snapshot.lost[:3])
            if len(snapshot.lost) > 3:
                reasons += f"; and {len(snapshot.lost) - 3} more"
            raise DiscoveryError(
                f"{len(snapshot.lost)} GPU(s) lost ({reasons}); the last labels stay unless "
                "the next pass finds the same"
            )

    def _fail_pass(self, started: float, exc: Exception | None, unexpected: bool = False) -> None:
        duration = self._monotonic() - started
        self.metrics.pass_finished("error", duration, None)
        self.last_error = None if exc is None else error_text(exc)
        if exc is not None:
            # an unexpected exception is a bug: log it with its traceback
            record = self.log.exception if unexpected else self.log.error
            if self.settings.oneshot and not unexpected:
                record = self.log.debug  # the CLI prints the error as its one line
            record(
                "pass failed",
                error=error_text(exc),
                kind=type(exc).__name__,
                duration_seconds=duration,
            )
        self._first_pass = False
        self._started = True
        self._keep_last_labels()

    def _keep_last_labels(self) -> None:
        """A failed pass keeps the last labels (SPEC §7); an output whose labels age out
        (the features file's expiry) renews them."""
        if self.published is None:
            return
        try:
            self.output.keep(self.published)
        except PublishError as exc:
            self.log.error("cannot renew the features file", error=error_text(exc))

    def _publish(self, labels: dict[str, str]) -> bool:
        """Publish when the set changed; otherwise verify at the output's interval."""
        now = self._monotonic()
        kind = self.output.kind
        try:
            if labels != self.published:
                self.output.publish(labels)
                self.published = dict(labels)
                self._last_check = now
                self.metrics.publish_result(kind, "success")
                return True
            interval = self.output.verify_interval
            repair = self._signals.repair
            if repair:  # cleared only when set: a watch's wake landing now is never lost
                self._signals.repair = False
            if repair or (interval is not None and now - self._last_check >= interval):
                republished = self.output.verify(labels)
                self._last_check = now
                if republished:
                    self.log.warning("labels were changed by someone else; published again")
                    self.metrics.publish_result(kind, "success")
                return republished
            return False
        except PublishError:
            self.metrics.publish_result(kind, "error")
            # publish the whole set again next pass, whatever we believe is there
            self.published = None
            raise

    # ------------------------------------------------------------------ the loop

    def _follow_node_config(self) -> None:
        """Before a pass: the entry the node label chooses now; a new one is loaded through
        the SIGHUP reload.  Whatever cannot be applied leaves the config in force and one
        error line (until the label changes again)."""
        current = self.settings.config_choice
        in_force = None if current is None else current.entry
        try:
            if self._node_label is None:
                self._node_label = reader = NodeLabelReader(self.settings)
                self._watch(reader, self._node_changed)
            value = self._node_label()
            choice = choose_for(self.settings, value)
        except NodeConfigError as exc:
            if self._refused != str(exc):
                self._refused = str(exc)
                self.log.error(
                    "node config not applied; the config in force stays",
                    error=str(exc),
                    config=in_force,
                )
            return
        except (PublishError, UsageError) as exc:
            self.log.error(
                "cannot read the node's config label; the config in force stays",
                error=str(exc),
                config=in_force,
            )
            return
        if current is not None and choice.entry == current.entry:
            self._refused = None
            return
        if self._refused == f"entry {choice.entry}":
            return
        self.log.info(
            "node config chosen", entry=choice.entry, reason=choice.reason, previous=in_force
        )
        if not self._reload(choice):
            self._refused = f"entry {choice.entry}"

    def _reload(self, config_choice: ConfigChoice | None = None) -> bool:
        """Reload the settings (SIGHUP, or the node label choosing another config entry);
        False when they are refused and the settings in force stay."""
        self._signals.reload = False
        if config_choice is None:
            self._refused = None  # a SIGHUP tries again what the label asked for
        try:
            if self.settings.config_file_srcdir:
                new = self._reload_settings(
                    config_choice=config_choice or self.settings.config_choice
                )
            else:
                new = self._reload_settings()
        except UsageError as exc:
            self.log.error("reload failed; keeping the settings in force", error=error_text(exc))
            return False
        output = self.output
        if output_identity(new) != output_identity(self.settings):
            try:
                # an API output runs the kubeconfig's credential plugin here: a stop ends it
                with interrupt.interruptible():
                    output = self._build_output(new)
            except UsageError as exc:
                self.log.error(
                    "reload failed; keeping the settings in force", error=error_text(exc)
                )
                return False
            except interrupt.Interrupted:
                return False  # the stop is recorded: the loop exits
        restart_coalescing()
        for warning in new.warnings:
            self.log.warning("config warning", detail=warning)
        self.log.info("settings reloaded")
        self._previous = (self.settings, self.output)
        self._switch(new, output)
        return True

    def _revert(self) -> None:
        """The reloaded settings cannot apply to this node: go back to the previous ones."""
        assert self._previous is not None
        self.log.error("reloaded settings rejected; the previous settings stay in force")
        settings, output = self._previous
        self._previous = None
        refused = self.settings.config_choice
        if refused is not None and refused != settings.config_choice:
            self._refused = f"entry {refused.entry}"  # not loaded again until the label changes
        self._switch(settings, output)

    def _switch(self, settings: Settings, output: Output) -> None:
        """Put ``settings`` and ``output`` in force.  Every place the old settings published
        to and the new ones do not is retired -- removed as ``--cleanup`` removes it -- once
        the new settings' first pass has published (:meth:`_retire`), so that the node
        always has one of the two."""
        old = self._places()
        if output is not self.output:
            self._unwatch(self.output)
            self._watch(output)
        self._move_metrics(settings)
        self.settings = settings
        self.output = output
        self._unwatch(self.topology_outputs)
        self.topology_outputs = make_topology_outputs(settings)
        self._watch(self.topology_outputs)
        new = self._places()
        # a place the new settings publish to again is theirs now: never remove it
        self._retiring = {place: r for place, r in self._retiring.items() if place not in new}
        for place, retiree in old.items():
            if place not in new:
                self._retiring.setdefault(place, retiree)
        self.metrics.set_sleep_interval(settings.sleep_interval)
        self._follow_slices()
        self._new_run()

    def _move_metrics(self, settings: Settings) -> None:
        """A reload changed ``--metrics-address``: serve at the new address (started before
        the old one closes), or stop serving; where the new one cannot be served, one line
        and the old server stays."""
        old, new = self.settings.metrics_address, settings.metrics_address
        if old == new:
            return
        try:
            if old and new:
                self.metrics.rebind(new)
            else:
                replacement = start_metrics(settings)
                self.metrics.close()
                self.metrics = replacement
        except (GfdError, RuntimeError) as exc:
            self.log.error(
                "metrics address not changed; serving where it was", address=old, error=str(exc)
            )
            return
        self.log.info("metrics address changed", address=new or None, previous=old or None)

    def _places(self) -> dict[tuple[object, ...], _Retiree]:
        """Where the settings in force publish, each with what removes it (``--cleanup``'s
        code: the output's and the extras' own cleanup)."""
        places = {output_place(self.settings): _Retiree(self.output.kind, self.output.cleanup)}
        extras = self.topology_outputs
        if extras is not None and extras.annotation is not None:
            annotation = extras.annotation
            where = ("node-annotation", annotation.node_name)
            places[where] = _Retiree("node-annotation", annotation.cleanup)
        if extras is not None and extras.koordlet is not None:
            koordlet = extras.koordlet
            where = ("koordlet", real_path_or_same(koordlet.path))
            places[where] = _Retiree("koordlet", koordlet.cleanup)
        return places

    def _retire(self) -> None:
        """After a pass that published: remove what an earlier reload moved away from.  A
        failure is logged and counted, and tried again after the next pass."""
        for place, retiree in list(self._retiring.items()):
            try:
                retiree.cleanup()
            except PublishError as exc:
                self.metrics.retire_result(retiree.kind, "error")
                self.log.error(
                    "cannot remove what the previous settings published; trying again next pass",
                    previous_output=retiree.kind,
                    error=error_text(exc),
                )
                continue
            del self._retiring[place]
            self.metrics.retire_result(retiree.kind, "success")
            self.log.info(
                "removed what the previous settings published", previous_output=retiree.kind
            )

    def _exit_output(self) -> None:
        try:
            self.output.on_exit()
        except PublishError as exc:
            self.log.error("cleanup on exit failed", error=error_text(exc))
        if self._retiring:
            self.log.warning(
                "exiting before what the previous settings published was removed; "
                "gfd --cleanup with those settings removes it",
                previous_outputs=sorted(retiree.kind for retiree in self._retiring.values()),
            )

    def run(self) -> int:
        self._watch(self.output)
        self._watch(self.topology_outputs)
        self._follow_slices()
        if self._node_label is not None:  # the reader the CLI made to choose the first entry
            self._watch(self._node_label, self._node_changed)
        try:
            while True:
                if self._signals.stop:  # came before the first pass: nothing to finish
                    return self._stop()
                self._signals.changed = False
                if self.settings.config_file_srcdir and (
                    self._started or self.settings.config_choice is None
                ):
                    self._follow_node_config()
                ok = self.run_pass()
                if self.settings.oneshot:
                    return EXIT_OK if ok else EXIT_RUNTIME
                self._wait()
                if self._signals.stop:
                    return self._stop()
                if self._signals.reload:
                    self._reload()
        finally:
            self.metrics.close()

    def _stop(self) -> int:
        self.log.info("signal received; exiting", signal=self._signals.name)
        self._exit_output()
        return EXIT_OK

    def _wait(self) -> None:
        if self._signals.stop or self._signals.reload:
            return
        self._wake.clear()
        if self._signals.stop or self._signals.reload or self._signals.changed:
            return
        self._sleep(self.settings.sleep_interval)

    def _sleep_until_woken(self, interval: float | None) -> None:
        self._wake.wait(interval)  # None: until a signal
