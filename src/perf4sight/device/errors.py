"""The project's exceptions, defined here so that the device needs nothing of the host
(`perf4sight.errors` re-exports them).

Each subclasses a built-in exception so that callers can catch it without importing
perf4sight; the CLI and the bundle's runner turn any of them into one line on stderr and
exit code 2.
"""

__all__ = [
    "Perf4sightError",
    "ConfigError",
    "NetworkError",
    "ModelFileError",
    "LogFormatError",
    "DataNotFoundError",
    "FittedModelError",
    "UsageError",
    "LogFolderBusyError",
]


class Perf4sightError(Exception):
    """Base class: an error caused by the user's input, reported without a traceback."""


class ConfigError(Perf4sightError, ValueError):
    """A config file, section, key or value is wrong."""


class NetworkError(Perf4sightError, ValueError):
    """A network cannot be built, pruned or rebuilt from its description."""


class ModelFileError(Perf4sightError, ImportError):
    """A model description file cannot be imported or lacks its factory function."""


class LogFormatError(Perf4sightError, ValueError):
    """A profiling CSV lacks a column or has a malformed row."""


class DataNotFoundError(Perf4sightError, FileNotFoundError):
    """Files that a stage needs (logs, specs, fitted models) are not where they were looked for."""


class FittedModelError(Perf4sightError, ValueError):
    """A stored fitted model is for another stage, target or library version."""


class UsageError(Perf4sightError, ValueError):
    """An argument is out of range: a batch size of 0, a budget that nothing fits, a bad unit."""


class LogFolderBusyError(Perf4sightError, RuntimeError):
    """Another campaign is profiling into the same log folder."""
