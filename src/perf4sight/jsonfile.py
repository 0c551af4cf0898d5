"""Reading the JSON files perf4sight writes (specs, model metadata) with errors that name them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perf4sight.errors import DataNotFoundError, Perf4sightError

__all__ = ["read_json"]


def read_json(path: str | Path, *, what: str, error: type[Perf4sightError]) -> Any:
    """The parsed file; DataNotFoundError when it is missing, `error` when it is not JSON.

    JSON is UTF-8 whatever the locale, and a file that is not (a binary file, another
    encoding) is as unreadable as a syntax error, so it gets the same error.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid JSON: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON: {exc}") from None
