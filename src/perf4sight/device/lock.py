"""One writer per folder: a campaign per log folder, a fingerprint per model folder.

Two campaigns on one folder would each run every test (both reading the same rows as
missing) and time each other; two fingerprints would each replace the other's models. A
writer holds an exclusive OS lock (`flock`) on a lock file in the folder for its whole
run; the kernel drops it when the process ends, however it ends, so a killed writer never
blocks the next.
"""

import fcntl
import os
from pathlib import Path
from typing import Any, Optional

from .errors import FolderBusyError

__all__ = ["LOCK_FILE", "FolderLock", "LogFolderLock"]

LOCK_FILE = "campaign.lock"


class FolderLock:
    """A context manager holding `folder`'s lock file `name`; FolderBusyError when another
    process holds it, with `busy` (formatted with the `folder` and the holder's `pid`)."""

    def __init__(self, folder: Path, name: str, busy: str) -> None:
        self.folder = Path(folder)
        self.name = name
        self.busy = busy
        self._fd: Optional[int] = None

    def __enter__(self) -> "FolderLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.folder / self.name), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise FolderBusyError(self.busy.format(folder=self.folder, pid=holder)) from None
        os.ftruncate(fd, 0)
        os.write(fd, "{}\n".format(os.getpid()).encode("ascii"))
        self._fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # no holder any more
            os.close(self._fd)  # the lock goes with the descriptor
            self._fd = None


class LogFolderLock(FolderLock):
    """The log folder's lock (`<log_dir>/campaign.lock`), held by a campaign."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir, LOCK_FILE, "{folder}: another campaign (pid {pid}) is profiling into this log "
                                             "folder; wait for it to end or give another log folder")
