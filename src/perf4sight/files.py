"""The files perf4sight writes and reads back: written whole or not at all, read with
errors that name them.

A run can be stopped at any moment (Ctrl-C, a killed job, a full disk). A file written in
place would then be left truncated, and the next run would read half a spec or half a
model; written to a temporary file beside it and renamed over it, it is the old file or
the new one, never a part. A temporary file is named after its target and the writing
process (`.<name>.<pid>.tmp`); one whose process is gone (killed mid-write) is removed by
the next write of the same file, or by `remove_stale_temporaries` for a whole folder.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perf4sight.errors import DataNotFoundError, Perf4sightError

__all__ = ["read_json", "remove_stale_temporaries", "replaced", "write_text"]

_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]{1,10})\.tmp")


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (this one included)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(folder: str | Path, name: str | None = None) -> list[Path]:
    """Remove the temporary files in `folder` (of the file `name` only, if given) whose
    writing process is no longer running: what a kill in the middle of a write leaves.
    Returns the removed paths."""
    pattern = f".{glob.escape(name)}.*.tmp" if name is not None else ".*.tmp"
    removed = []
    for candidate in Path(folder).glob(pattern):
        match = _TEMPORARY.fullmatch(candidate.name)
        if match and (name is None or match["name"] == name) and not _alive(int(match["pid"])):
            candidate.unlink(missing_ok=True)
            removed.append(candidate)
    return removed


@contextlib.contextmanager
def replaced(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; renamed over `path` when the block ends
    without an error, removed otherwise. Temporaries of `path` left by killed writers go."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if path.parent.is_dir():
        remove_stale_temporaries(path.parent, path.name)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole: a reader sees the old file or the new one."""
    with replaced(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def read_json(path: str | Path, *, what: str, error: type[Perf4sightError]) -> Any:
    """The parsed file; DataNotFoundError when it is missing (or not a file), `error` when
    it is not JSON.

    JSON is UTF-8 whatever the locale, and a file that is not (a binary file, another
    encoding) is as unreadable as a syntax error, so it gets the same error.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"{what} {'is not a file' if path.exists() else 'not found'}: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid JSON: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise error(f"{path}: not valid JSON: nested too deeply") from None
