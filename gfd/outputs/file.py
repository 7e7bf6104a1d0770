"""The NFD features file (SPEC §6.1) and stdout.

The file is replaced atomically: a dot-file in the same directory (NFD ignores dot-files)
is written, fsynced and renamed over the target, so NFD never reads half a file."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile

from gfd.documents import clip
from gfd.errors import PublishError
from gfd.labels import format_labels
from gfd.outputs import Labels

#: NFD skips feature files larger than this; fail loudly instead of being ignored quietly
MAX_FEATURES_FILE_BYTES = 64 * 1024


def _refuse_special_file(path: str) -> None:
    """Never rename over, read or remove a FIFO, a device node (``-o /dev/null`` as root),
    a socket or a directory at the output path: only a regular file is gfd's to replace.
    The CLI refuses such a path at start (exit 2); this catches one put there later."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing (written fresh), or unreadable (the write says why)
    if not stat.S_ISREG(mode):
        raise PublishError(f"{clip(path)}: not a regular file; gfd only replaces regular files")


class StdoutOutput:
    kind = "stdout"
    verify_interval: float | None = None

    def publish(self, labels: Labels) -> None:
        if sys.stdout is None:  # started with stdout closed
            raise PublishError("cannot write labels to stdout: stdout is closed")
        try:
            sys.stdout.write(format_labels(dict(labels)))
            sys.stdout.flush()
        except OSError as exc:
            raise PublishError(f"cannot write labels to stdout: {exc.strerror or exc}") from None

    def verify(self, labels: Labels) -> bool:
        return False

    def on_exit(self) -> None:
        pass

    def cleanup(self) -> None:
        pass


class FileOutput:
    kind = "file"
    #: checking the file is a local stat and read, so it is done every pass: a file removed
    #: or edited by someone else is put back at the next pass
    verify_interval: float | None = 0.0

    def __init__(self, path: str, *, remove_on_exit: bool) -> None:
        self.path = path
        self.remove_on_exit = remove_on_exit

    def publish(self, labels: Labels) -> None:
        _refuse_special_file(self.path)
        data = format_labels(dict(labels)).encode("utf-8")
        if len(data) > MAX_FEATURES_FILE_BYTES:
            raise PublishError(
                f"labels take {len(data)} bytes, more than the {MAX_FEATURES_FILE_BYTES} bytes "
                f"NFD reads from {self.path}; not written"
            )
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise PublishError(
                f"output directory {directory} does not exist (is the NFD features.d "
                "directory mounted?)"
            )
        temporary = None
        try:
            fd, temporary = tempfile.mkstemp(prefix=".gfd-", dir=directory)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, 0o644)
            os.replace(temporary, self.path)
            temporary = None
        except OSError as exc:
            raise PublishError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)

    def verify(self, labels: Labels) -> bool:
        expected = format_labels(dict(labels)).encode("utf-8")
        try:
            _refuse_special_file(self.path)  # opening a FIFO nobody writes would block
            with open(self.path, "rb") as handle:
                if handle.read(MAX_FEATURES_FILE_BYTES + 1) == expected:
                    return False
        except OSError:
            pass
        self.publish(labels)
        return True

    def _remove(self) -> None:
        _refuse_special_file(self.path)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PublishError(f"cannot remove {self.path}: {exc.strerror or exc}") from None

    def on_exit(self) -> None:
        if self.remove_on_exit:
            self._remove()

    def cleanup(self) -> None:
        self._remove()
