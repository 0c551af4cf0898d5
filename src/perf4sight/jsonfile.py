"""Reading the JSON files perf4sight writes (specs, model metadata) with errors that name them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perf4sight.errors import DataNotFoundError, Perf4sightError

__all__ = ["read_json"]


def read_json(path: str | Path, *, what: str, error: type[Perf4sightError]) -> Any:
    """The parsed file; DataNotFoundError when it is missing, `error` when it is not JSON."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON: {exc}") from None
