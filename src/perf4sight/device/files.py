"""Files written whole: a run can be stopped at any moment, and a reader must then see
the old file or the new one, never a part (written beside it, then renamed over it).

A temporary file is named after its target and the writing process (`.<name>.<pid>.tmp`);
one whose process is gone (killed mid-write) is removed by the next write of the same
file, or by `remove_stale_temporaries` for a whole folder. Defined here, in the device
package, so that the device's logs and the host's specs and models are written alike.
"""

import contextlib
import glob
import hashlib
import os
import re
from pathlib import Path
from typing import Iterator, List, Optional, Union

__all__ = ["file_digest", "remove_stale_temporaries", "replaced", "write_text"]

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


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def remove_stale_temporaries(folder: Union[str, Path], name: Optional[str] = None) -> List[Path]:
    """Remove the temporary files in `folder` (of the file `name` only, if given) whose
    writing process is no longer running: what a kill in the middle of a write leaves.
    Returns the removed paths."""
    pattern = ".{}.*.tmp".format(glob.escape(name)) if name is not None else ".*.tmp"
    removed = []
    for candidate in Path(folder).glob(pattern):
        match = _TEMPORARY.fullmatch(candidate.name)
        if match and (name is None or match.group("name") == name) and not _alive(int(match.group("pid"))):
            _unlink(candidate)
            removed.append(candidate)
    return removed


@contextlib.contextmanager
def replaced(path: Union[str, Path]) -> Iterator[Path]:
    """A temporary path beside `path` to write; renamed over `path` when the block ends
    without an error, removed otherwise. Temporaries of `path` left by killed writers go."""
    path = Path(path)
    temporary = path.with_name(".{}.{}.tmp".format(path.name, os.getpid()))
    if path.parent.is_dir():
        remove_stale_temporaries(path.parent, path.name)
    try:
        yield temporary
        os.replace(str(temporary), str(path))
    finally:
        _unlink(temporary)


def write_text(path: Union[str, Path], text: str) -> None:
    """Write `text` (UTF-8) to `path` whole: a reader sees the old file or the new one."""
    with replaced(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def file_digest(path: Union[str, Path]) -> str:
    """The SHA-256 of a file's bytes: what a model file or spec is, wherever it lies (a cache
    key on the host, a log row's record of what it measured)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
