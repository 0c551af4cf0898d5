"""Checks of values read from config files and test configs, one rule each, shared by
the host's config reader and the device's test config reader."""

import configparser
import numbers
from pathlib import Path
from typing import Iterable, List, Type

from .errors import ConfigError

__all__ = ["is_positive_int", "check_batch_sizes", "read_ini"]


def is_positive_int(value: object) -> bool:
    """Whether `value` is an integer of 1 or more, numpy's included (a bool, though an int, is not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0


def check_batch_sizes(values: Iterable[object], where: str, error: Type[Exception] = ConfigError) -> List[int]:
    """`values` as ints, if there is at least one and each is a positive integer; else `error`
    naming `where` they came from. A float is refused, not truncated: 1.5 is no batch size."""
    sizes = list(values)
    if not sizes:
        raise error("{}: empty list; expected positive integers".format(where))
    for value in sizes:
        if not is_positive_int(value):
            raise error("{}: expected positive integers, got {!r}".format(where, value))
    return [int(value) for value in sizes]


def read_ini(path: Path, *, kind: str = "config file") -> configparser.ConfigParser:
    """Parse an .ini file (no interpolation); ConfigError when missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("{} not found: {}".format(kind, path))
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(str(path), encoding="utf-8")
    except configparser.Error as exc:
        raise ConfigError("{}: cannot parse: {}".format(path, exc).replace("\n", " ")) from None
    except UnicodeDecodeError as exc:
        raise ConfigError("{}: not UTF-8 text (byte {}); is it a {}?".format(path, exc.start, kind)) from None
    return parser
