"""Reading config files and test configs, one rule each, shared by the host's config
reader and the device's test config reader (the checks of the values they hold are in
`definitions`)."""

import configparser
import re
from pathlib import Path
from typing import Optional

from .errors import ConfigError, clip

__all__ = ["is_decimal_number", "parse_decimal", "read_ini"]


def parse_decimal(text: str) -> Optional[int]:
    """The integer an ASCII decimal numeral writes (surrounding blanks allowed), or None:
    `str.isdigit` and `int` accept other scripts' digits and superscripts ('\u00b2')."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,30}", text) else None


def is_decimal_number(text: str) -> bool:
    """Whether `text` (surrounding blanks allowed) is a number written in ASCII decimals, as
    a measuring tool writes one (`12`, `-1.5`, `1e-05`): not `0x10`, `1_000`, `inf` or `nan`."""
    return re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?", text.strip()) is not None


def read_ini(path: Path, *, kind: str = "config file") -> configparser.ConfigParser:
    """Parse an .ini file (no interpolation; a UTF-8 byte order mark, as some editors
    write, is skipped; a `;` or `#` after a blank starts a comment, as at the start of a
    line, so that `model_path = out/models ; specs` names `out/models`); ConfigError when
    missing or malformed."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError("{}: is a folder, not a {}".format(path, kind))
    if not path.is_file():
        raise ConfigError("{} not found: {}".format(kind, path))
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    try:
        parser.read(str(path), encoding="utf-8-sig")
    except configparser.Error as exc:
        raise ConfigError("{}: cannot parse: {}".format(path, clip(str(exc), 200))) from None
    except UnicodeDecodeError as exc:
        raise ConfigError("{}: not UTF-8 text (byte {}); is it a {}?".format(path, exc.start, kind)) from None
    return parser
