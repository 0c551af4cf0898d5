"""One campaign per log folder.

Two campaigns on one folder would each run every test (both reading the same rows as
missing) and time each other. A campaign holds an exclusive OS lock (`flock`) on
`<log_dir>/campaign.lock` for its whole run; the kernel drops it when the process ends,
however it ends, so a killed campaign never blocks the next.
"""

import fcntl
import os
from pathlib import Path
from typing import Any, Optional

from .errors import LogFolderBusyError

__all__ = ["LOCK_FILE", "LogFolderLock"]

LOCK_FILE = "campaign.lock"


class LogFolderLock:
    """A context manager holding the log folder's lock; LogFolderBusyError, naming the
    folder and the holder's process id, when another process holds it."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self._fd: Optional[int] = None

    def __enter__(self) -> "LogFolderLock":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.log_dir / LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise LogFolderBusyError(
                "{}: another campaign (pid {}) is profiling into this log folder; wait for it to end "
                "or give another log folder".format(self.log_dir, holder)
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, "{}\n".format(os.getpid()).encode("ascii"))
        self._fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # no holder any more
            os.close(self._fd)  # the lock goes with the descriptor
            self._fd = None
