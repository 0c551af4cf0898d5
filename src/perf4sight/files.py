"""The files perf4sight writes and reads back: written whole or not at all, read with
errors that name them.

A run can be stopped at any moment (Ctrl-C, a killed job, a full disk). A file written in
place would then be left truncated, and the next run would read half a spec or half a
model; written to a temporary file beside it and renamed over it, it is the old file or
the new one, never a part (`perf4sight.device.files`, which the device's logs use too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perf4sight.device.files import remove_stale_temporaries, replaced, write_text
from perf4sight.errors import DataNotFoundError, Perf4sightError

__all__ = ["read_json", "remove_stale_temporaries", "replaced", "write_text"]


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
