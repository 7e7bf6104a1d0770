"""Error types.  Errors are values until the edge: the CLI turns the first three into one
clear line on stderr and exit status 2."""

from __future__ import annotations


class GfdError(Exception):
    """Base class of every error gfd raises on purpose."""


class UsageError(GfdError):
    """A bad flag, environment variable or combination of them (exit status 2)."""


class ConfigError(UsageError):
    """A bad config file (exit status 2)."""


class SnapshotError(UsageError):
    """A malformed snapshot file (exit status 2)."""


class NvmlUnavailableError(GfdError):
    """NVML cannot be used at all: library missing, nvmlInit failing, no platform."""


class NvmlLibraryMissingError(NvmlUnavailableError):
    """``libnvidia-ml.so.1`` itself could not be loaded (what upstream's platform check
    reads as "not an NVML system")."""


class DiscoveryError(GfdError):
    """Discovery failed for this pass (e.g. an NVML error on one device)."""


class LabelError(GfdError):
    """The snapshot cannot be labelled (e.g. a malformed driver version); fails one pass."""


class PublishError(GfdError):
    """Publishing failed for this pass (disk full, API server down, ...)."""
