"""The files perf4sight writes and reads back: written whole or not at all, read with
errors that name them.

A run can be stopped at any moment (Ctrl-C, a killed job, a full disk). A file written in
place would then be left truncated, and the next run would read half a spec or half a
model; written to a temporary file beside it and renamed over it, it is the old file or
the new one, never a part (`perf4sight.device.files`, which the device's logs use too).
Files that are read together (a fingerprint's models and their headers) are replaced
together (`write_together`): a reader sees the old set or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perf4sight.device.files import remove_stale_temporaries, replaced, write_text
from perf4sight.errors import DataNotFoundError, Perf4sightError

__all__ = ["current_file", "read_json", "remove_stale_temporaries", "replaced", "write_text", "write_together"]

# In a folder, the list of staged files and the files they replace, written whole once every
# staged file is: from then on the new set is the folder's.
_REPLACING = ".replacing.json"
_STAGED = ".{}.staged"


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


def write_together(files: Mapping[Path, bytes]) -> None:
    """Write `files` (path -> content, all in one folder) as one set, whatever is killed
    when: each is staged beside its path, then the list of the renames is written whole (from
    then on the set is the new one), then the renames are done and the list removed. A set
    a killed writer staged but did not list is removed by the next call; one it listed is
    finished by it, and read as the new set until then (`current_file`). One writer at a time:
    the caller holds the folder's lock."""
    folders = {Path(path).parent for path in files}
    if len(folders) != 1:
        raise ValueError(f"write_together: files in {len(folders)} folders, expected one")
    folder = folders.pop()
    folder.mkdir(parents=True, exist_ok=True)
    _finish(folder)
    for leftover in folder.glob(_STAGED.format("*")):  # staged by a writer killed before its list
        leftover.unlink()
    for path, data in files.items():
        _staged(Path(path)).write_bytes(data)
    write_text(folder / _REPLACING, json.dumps([Path(path).name for path in files]))
    _finish(folder)


def current_file(path: str | Path) -> Path:
    """Where the content of `path` is now: its staged file while a set listed to replace it
    is not yet renamed into place (`write_together`), else `path`."""
    path = Path(path)
    staged = _staged(path)
    return staged if staged.is_file() and path.name in _listed(path.parent) else path


def _staged(path: Path) -> Path:
    return path.with_name(_STAGED.format(path.name))


def _listed(folder: Path) -> list[str]:
    """The names a set being replaced in `folder` lists (none when no set is)."""
    try:
        names = json.loads((folder / _REPLACING).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise Perf4sightError(f"{folder / _REPLACING}: unreadable ({exc}); remove it and write again") from None
    if not isinstance(names, list):
        return []
    return [name for name in names if isinstance(name, str) and name == Path(name).name not in ("", ".", "..")]


def _finish(folder: Path) -> None:
    """Rename a listed set's staged files into place, then remove the list."""
    for name in _listed(folder):
        staged = _staged(folder / name)
        if staged.is_file():
            os.replace(staged, folder / name)
    (folder / _REPLACING).unlink(missing_ok=True)
