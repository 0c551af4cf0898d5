"""Files written whole: a run can be stopped at any moment, and a reader must then see
the old file or the new one, never a part (written beside it, then renamed over it)."""

import os
from pathlib import Path
from typing import Union

__all__ = ["write_text"]


def write_text(path: Union[str, Path], text: str) -> None:
    """Write `text` (UTF-8) to `path` whole."""
    path = Path(path)
    temporary = path.with_name(".{}.{}.tmp".format(path.name, os.getpid()))
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(str(temporary), str(path))
    finally:
        if temporary.exists():
            temporary.unlink()
