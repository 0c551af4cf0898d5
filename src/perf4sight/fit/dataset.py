"""Training and evaluation tables: log rows joined with the features of their architectures.

Each log row names its architecture by file name (the `model` column); the architecture is
looked up in the pruned-models folder as `<name>.json` (a spec) or `<name>.py` (a model
description), at the input size and class count the row's `dataset` ran it with (`spec`:
its own). A `Dataset`'s rows are the query frame a model is fitted on (each row's
`architecture` and `batch_size`, and who it is); its features are the feature set's
table of them, computed once per architecture for all of its batch sizes and kept with it
for the models' own feature step (`perf4sight.features.feature_table`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.architecture import Architecture, Detail, family_key
from perf4sight.device.definitions import DATASETS, dataset_load_options
from perf4sight.cache import file_digest
from perf4sight.device.logs import SPEC_DIGEST, architecture_name
from perf4sight.device.recipe import DEFAULT_RECIPE, RECIPE_COLUMNS, Recipe
from perf4sight.errors import DataNotFoundError, LogFormatError, clip
from perf4sight.features import ARCHITECTURE, BATCH_SIZE, FEATURE_SETS, feature_table
from perf4sight.networks import load_architecture, read_spec

__all__ = ["ArchitectureCatalog", "Dataset", "architecture_name", "build_dataset", "logged_recipes", "row_recipes"]


class ArchitectureCatalog:
    """Architectures of a pruned-models folder by name, each loaded once for each detail a
    feature set needs (`FeatureFunction.needs`) and each training recipe: a spec's layer
    table for the paper's features reads the file and builds nothing, which the traced
    description would."""

    def __init__(self, storedir: str | Path) -> None:
        self.storedir = Path(storedir)
        self._cache: dict[tuple[str, str, Detail, str, Recipe], Architecture | None] = {}
        self._checked: set[Path] = set()
        self._digests: dict[Path, str] = {}

    def get(self, name: str, dataset: str = "spec", *, needs: Detail = Detail.LAYERS,
            stage: str = "training", recipe: Recipe = DEFAULT_RECIPE) -> Architecture | None:
        """The architecture called `name` as `dataset` (a `DATASETS` key) runs it under
        `recipe`, holding `needs` (for `stage`), or None when the folder has no file for it."""
        key = (name, dataset, needs, stage if needs is Detail.LIFETIMES else "", recipe)
        if key not in self._cache:
            self._cache[key] = self._load(name, dataset, needs, stage, recipe)
        return self._cache[key]

    def check_measured(self, name: str, rows: pd.DataFrame) -> None:
        """Refuse log `rows` of the architecture `name` that record the digest of the spec they
        were measured as (`SPEC_DIGEST`) when the folder's `<name>.json` has other contents: a
        spec written again since (another input size, seed or level) would be fitted against
        runs of the old one."""
        if SPEC_DIGEST not in rows.columns:
            return
        path = self.storedir / f"{name}.json"
        measured = rows[rows[SPEC_DIGEST].notna()]
        if measured.empty or not path.is_file():
            return
        if path not in self._digests:
            self._digests[path] = file_digest(path)
        other = measured[measured[SPEC_DIGEST] != self._digests[path]]
        if len(other):
            raise LogFormatError(
                f"{other.iloc[0]['log']}: {name} was measured as a spec other than {path} (its SHA-256 differs: "
                "the spec was written again since?); fit with the specs the logs were measured against, or "
                "profile it again")

    def _load(self, name: str, dataset: str, needs: Detail, stage: str, recipe: Recipe) -> Architecture | None:
        for path in (self.storedir / f"{name}.json", self.storedir / f"{name}.py"):
            if path.is_file():
                if path.suffix == ".json" and path not in self._checked:
                    _check_spec_names(read_spec(path), path, name)
                    self._checked.add(path)
                return load_architecture(path, needs=needs, stage=stage, recipe=recipe,
                                         **dataset_load_options(dataset))
        return None


def _check_spec_names(spec: dict[str, Any], path: Path, name: str) -> None:
    """Refuse the spec at `path` that the logs' architecture `name` (`<net>_<level>`) finds
    when it says it is another architecture or network: its runs would be fitted with the
    features of a network they did not measure."""
    net = re.fullmatch(r"(.+)_[0-9]+", name)
    for key, what, value in (("name", "architecture", name), ("net", "network", net.group(1) if net else None)):
        if value is not None and spec.get(key) is not None and spec[key] != value:
            raise LogFormatError(f"{path}: the spec's {key} is {clip(repr(spec[key]))}, but the logs that name "
                                 f"this file measured the {what} {value!r}")


@dataclass(frozen=True)
class Dataset:
    """Aligned rows: `rows` (the query frame a model is fitted on, X), `target` (y) and
    `features` (the feature set's columns of those rows).

    `rows` has architecture (the `Architecture`, under the run's recipe), net, model,
    batch_size, params, family (`family_key`), measured and the recipe's columns
    (`RECIPE_COLUMNS`), for the fit, reports, training ranges and calibration.
    """

    features: pd.DataFrame
    target: np.ndarray
    rows: pd.DataFrame
    stage: str = "training"  # the stage the runs ran (the models' features are of it)
    torch_version: str | None = None  # the device's PyTorch (None: as the host's saves)
    fresh_pages_ms_per_mib: float | None = None  # the device's measured cost of fresh pages (None: not measured)

    def __len__(self) -> int:
        return len(self.target)

    def recipes(self) -> list[Recipe]:
        """The distinct training recipes of the runs, in the order they first appear."""
        return logged_recipes(self.rows)

    def select(self, mask: Any) -> Dataset:
        """The rows where the boolean `mask` is true, index reset."""
        mask = np.asarray(mask, dtype=bool)
        return Dataset(
            features=self.features[mask].reset_index(drop=True),
            target=self.target[mask],
            rows=self.rows[mask].reset_index(drop=True),
            stage=self.stage,
            torch_version=self.torch_version,
            fresh_pages_ms_per_mib=self.fresh_pages_ms_per_mib,
        )


def logged_recipes(rows: pd.DataFrame) -> list[Recipe]:
    """The distinct training recipes of log rows (or a dataset's rows: their `RECIPE_COLUMNS`),
    in the order they first appear."""
    return row_recipes(rows[list(RECIPE_COLUMNS)].drop_duplicates())


def row_recipes(rows: pd.DataFrame) -> list[Recipe]:
    """Each log row's (or dataset row's) training recipe."""
    return [_recipe(values) for values in rows[list(RECIPE_COLUMNS)].itertuples(index=False)]


def _recipe(values: Sequence[Any]) -> Recipe:
    """The recipe of a log row's `RECIPE_COLUMNS` values (numpy's integers made ints)."""
    optimizer, precision, trainable, segments, zero_grad = values
    return Recipe(str(optimizer), str(precision), str(trainable), int(segments), str(zero_grad))


def _datasets(logs: pd.DataFrame) -> pd.Series:
    """Each row's `dataset` (`spec` where the log has no such column), checked."""
    if "dataset" not in logs.columns:
        return pd.Series("spec", index=logs.index)
    names = logs["dataset"].astype(str).str.strip()
    unknown = ~names.isin(list(DATASETS))
    if unknown.any():
        first = logs[unknown].iloc[0]
        where = f"{first['log']}: " if "log" in logs.columns else ""
        raise LogFormatError(f"{where}dataset={first['dataset']!r} (model {first['model']}); "
                             f"known: {', '.join(DATASETS)}")
    return names


def build_dataset(
    logs: pd.DataFrame,
    *,
    target: str,
    feature_set: str,
    stage: str,
    catalog: ArchitectureCatalog,
    passed_only: bool = True,
    torch_version: str | None = None,
    fresh_pages_ms_per_mib: float | None = None,
) -> Dataset:
    """Join log rows (from `read_logs`) with their features, the architectures as autograd
    saves them on the device's PyTorch, `torch_version`, fresh pages at the cost its profiler
    measured, `fresh_pages_ms_per_mib`; rows without an architecture are skipped with one
    warning that counts them, and none left is an error."""
    if passed_only:
        logs = logs[logs["passed"]]
    if "stage" in logs.columns:
        logs = logs[logs["stage"].astype(str).str.strip() == stage]
    logs = logs.assign(arch_name=logs["model"].map(architecture_name), dataset=_datasets(logs))
    needs = FEATURE_SETS[feature_set].needs
    blocks, kept, missing = [], [], []
    groups = list(logs.groupby(["arch_name", "dataset", *RECIPE_COLUMNS], sort=False))
    with console.progress(f"{target} rows, '{feature_set}' features", len(groups)) as bar:
        for (name, dataset, *values), group in groups:
            recipe = _recipe(values).for_stage(stage)
            arch = catalog.get(name, dataset, needs=needs, stage=stage, recipe=recipe)
            catalog.check_measured(name, group)
            if arch is None:
                missing.append((name, len(group)))
            else:
                blocks.append(feature_table(arch, group["bs"].to_numpy(), feature_set, stage, torch_version,
                                            fresh_pages_ms_per_mib))
                kept.append(group.assign(params=arch.params, family=family_key(arch), arch=[arch] * len(group)))
            bar.advance(name)
    if missing:
        skipped = sum(count for _, count in missing)
        absent = list(dict.fromkeys(name for name, _ in missing))  # once each, whatever its recipes
        names = ", ".join(absent[:5]) + (", ..." if len(absent) > 5 else "")
        console.warn(
            f"skipped {skipped} log rows of {len(absent)} architectures not found in {catalog.storedir} "
            f"(as <name>.json or <name>.py): {names}"
        )
    if not kept:
        stage_note = f" of stage '{stage}'" if "stage" in logs.columns else ""
        raise DataNotFoundError(
            f"no usable {target} log rows: no {'passed ' if passed_only else ''}row{stage_note} "
            f"names an architecture found in {catalog.storedir}"
        )
    rows = pd.concat(kept, ignore_index=True)
    return Dataset(
        features=pd.concat(blocks, ignore_index=True),
        target=rows[target].to_numpy(dtype=np.float64),
        rows=pd.DataFrame({
            ARCHITECTURE: rows["arch"],
            "net": rows["net"],
            "model": rows["arch_name"],
            BATCH_SIZE: rows["bs"].astype(int),
            "params": rows["params"].astype(int),
            "family": rows["family"],
            "measured": rows[target].astype(float),
            **{column: rows[column] for column in RECIPE_COLUMNS},
        }),
        stage=stage,
        torch_version=torch_version,
        fresh_pages_ms_per_mib=fresh_pages_ms_per_mib,
    )
