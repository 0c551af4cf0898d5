"""Which model files a spec may name: a model file is Python code, run when its network is built.

A spec runs the file its `model_desc` names when it is in the spec's own folder (the layout
`prune --write-model-files` writes and the TX2 dataset ships), or in a folder the user named for
their model files (`[create_network_dataset]`'s `model_desc_dir` and the folders of the model
files its `networks` list, of the config being run or the pruning of this process); anywhere else
only with `perf4sight --allow-model-files`. So a spec taken from elsewhere cannot reach for any file on
the machine unasked. Light on imports: the CLI sets it before loading anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["allow_model_files_anywhere", "is_model_file", "model_file_folders", "model_file_problem",
           "trust_model_folder"]

_anywhere = False
_folders: set[str] = set()


def allow_model_files_anywhere(allowed: bool) -> None:
    """Let specs name model files in any folder (the command line's `--allow-model-files`)."""
    global _anywhere
    _anywhere = allowed


def trust_model_folder(folder: str | Path) -> None:
    """Let specs name the model files in `folder`: the user named it for their own."""
    _folders.add(os.path.realpath(folder))


def is_model_file(source: str | Path) -> bool:
    """True for `something.py` or `something.py:factory`."""
    return bool(re.search(r"\.py(:\w+)?$", str(source)))


def model_file_folders(networks: Sequence[str], model_desc_dir: str | Path | None) -> list[Path]:
    """The folders of the user's own model files that [create_network_dataset] names: its
    `model_desc_dir` and those of the model files among its `networks`."""
    files = [Path(re.sub(r":\w+$", "", network)).parent for network in networks if is_model_file(network)]
    return files + ([Path(model_desc_dir)] if model_desc_dir is not None else [])


def model_file_problem(file: str | Path, spec_dir: str | Path) -> str | None:
    """Why a spec in `spec_dir` may not name `file` (None when it may)."""
    real = Path(os.path.realpath(file))
    if _anywhere or any(real.is_relative_to(folder) for folder in {os.path.realpath(spec_dir), *_folders}):
        return None
    return (f"model_desc {file} lies outside the spec's folder {spec_dir}: building its network would run that "
            "file's code; run `perf4sight --allow-model-files ...` if you trust it, or name its folder as "
            "[create_network_dataset] model_desc_dir")
