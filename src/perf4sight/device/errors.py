"""The project's exceptions, defined here so that the device needs nothing of the host
(`perf4sight.errors` re-exports them).

Each subclasses a built-in exception so that callers can catch it without importing
perf4sight; the CLI and the bundle's runner turn any of them into one line on stderr and
exit code 2.

A library function's check names its own argument (`device = cuda: ...`), raising
`ArgumentError`; the entry point that read the value from a config file or a command
line adds where it came from with `in_settings` (`config.ini: [profile] device = cuda: ...`).

A check says why a value cannot be used in one convention: a `*_problem` function returns
the one reason (a line) or None, a `*_problems` function every reason (a list, empty when
there is none), and a `check_*` function raises the reason as the error its caller names.
Values are checked at the entry point they came in by and passed inward as the checked
record (`definitions.BatchSizes`, a `Recipe`, a `ProfileTest`).
"""

from contextlib import contextmanager
from typing import Iterator

__all__ = [
    "Perf4sightError",
    "ConfigError",
    "ArgumentError",
    "NetworkError",
    "ModelFileError",
    "LogFormatError",
    "DataNotFoundError",
    "FittedModelError",
    "UsageError",
    "FolderBusyError",
    "clip",
    "in_settings",
]

# The longest value an error message quotes: a message is one line a person reads, and a
# value can be anything a file holds (a 200 KB line of brackets).
CLIP_LENGTH = 80


def clip(text: str, limit: int = CLIP_LENGTH) -> str:
    """`text` cut to `limit` characters, saying how long it was, on one line."""
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    if len(text) <= limit:
        return text
    return "{}... ({} characters)".format(text[:limit], len(text))


class Perf4sightError(Exception):
    """Base class: an error caused by the user's input, reported without a traceback."""


class ConfigError(Perf4sightError, ValueError):
    """A config file, section, key or value is wrong."""


class ArgumentError(ConfigError):
    """A library function's argument is wrong; the message names the argument, as the
    config key it is read from, and `in_settings` adds the file and section."""


@contextmanager
def in_settings(where: str) -> Iterator[None]:
    """Prefix `where` (a config file and section, `config.ini: [profile]`) to any
    ArgumentError raised inside: the one place an argument's origin is added."""
    try:
        yield
    except ArgumentError as exc:
        raise ConfigError("{} {}".format(where, exc)) from None


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


class FolderBusyError(Perf4sightError, RuntimeError):
    """Another process writes into the same folder: a campaign into a log folder, a
    fingerprint into a model folder (`lock.py`)."""
