"""Project exceptions, one definition each: they are defined in `perf4sight.device.errors`
(the device side raises them without perf4sight installed) and re-exported here.

Each subclasses a built-in exception so that callers can catch it without importing
perf4sight; the CLI turns any of them into one line on stderr and exit code 2.
"""

from perf4sight.device.errors import (
    ConfigError,
    DataNotFoundError,
    FittedModelError,
    LogFolderBusyError,
    LogFormatError,
    ModelFileError,
    NetworkError,
    Perf4sightError,
    UsageError,
)

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
