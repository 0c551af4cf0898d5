"""Checks of values read from config files and test configs, one rule each, shared by
the host's config reader and the device's test config reader."""

import configparser
import numbers
import re
from pathlib import Path
from typing import Iterable, List, Optional, Type

from .errors import ConfigError, clip

__all__ = ["MAX_BATCH_SIZE", "is_positive_int", "check_batch_sizes", "parse_decimal", "read_ini"]

# The largest batch size accepted anywhere (README, "Checks and limits").
MAX_BATCH_SIZE = 2**20


def is_positive_int(value: object) -> bool:
    """Whether `value` is an integer of 1 or more, numpy's included (a bool, though an int, is not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0


def check_batch_sizes(values: Iterable[object], where: str, error: Type[Exception] = ConfigError) -> List[int]:
    """`values` as ints, if there is at least one and each is a positive integer up to
    MAX_BATCH_SIZE; else `error` naming `where` they came from. A float is refused, not
    truncated: 1.5 is no batch size."""
    sizes = list(values)
    if not sizes:
        raise error("{}: empty list; expected positive integers".format(where))
    for value in sizes:
        if not is_positive_int(value):
            raise error("{}: expected positive integers, got {}".format(where, clip(repr(value))))
        if value > MAX_BATCH_SIZE:
            raise error("{}: {} is above the largest batch size, {}".format(where, clip(repr(value)), MAX_BATCH_SIZE))
    return [int(value) for value in sizes]


def parse_decimal(text: str) -> Optional[int]:
    """The integer an ASCII decimal numeral writes (surrounding blanks allowed), or None:
    `str.isdigit` and `int` accept other scripts' digits and superscripts ('\u00b2')."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,30}", text) else None


def read_ini(path: Path, *, kind: str = "config file") -> configparser.ConfigParser:
    """Parse an .ini file (no interpolation; a UTF-8 byte order mark, as some editors
    write, is skipped); ConfigError when missing or malformed."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError("{}: is a folder, not a {}".format(path, kind))
    if not path.is_file():
        raise ConfigError("{} not found: {}".format(kind, path))
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(str(path), encoding="utf-8-sig")
    except configparser.Error as exc:
        raise ConfigError("{}: cannot parse: {}".format(path, clip(str(exc), 200))) from None
    except UnicodeDecodeError as exc:
        raise ConfigError("{}: not UTF-8 text (byte {}); is it a {}?".format(path, exc.start, kind)) from None
    return parser
