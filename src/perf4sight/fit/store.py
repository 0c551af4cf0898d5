"""Fitted models on disk: one skops file per device folder, stage and target, plus metadata.

`<model_storedir>/<stage>_<target>.skops` holds the estimator (skops, never a pickle: only
the types the methods declare are trusted when loading) and `<stage>_<target>.json` what
a later run needs to trust and use it: method, stage, target, feature set and names, the
ranges of the training data, the library versions, and the features of a small reference
network. A model is refused when it was stored for another stage or target, by another
scikit-learn or perf4sight version, when its file no longer matches its metadata, or when
this run computes other features for the reference network than the fit did: features
defined differently would be fed to coefficients fitted on the old ones, silently.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import skops.io
from torch import nn

from perf4sight.architecture import Architecture
from perf4sight.errors import DataNotFoundError, FittedModelError
from perf4sight.features import FEATURE_SETS
from perf4sight.features.network import networks_per_group
from perf4sight.fit.calibration import FamilyCalibration, family_key
from perf4sight.fit.dataset import Dataset
from perf4sight.fit.methods import METHODS, trusted_types
from perf4sight.files import read_json, replaced, write_text
from perf4sight.networks import load_architecture

__all__ = ["FittedModel", "library_versions", "model_path", "save_model", "load_model"]

_FORMAT = 5  # 5: the reference network's features are stored (`feature_probe`)
# Versions that must match for a stored model to be used: the estimator's internals
# (scikit-learn) and the feature definitions (perf4sight).
_PINNED = ("scikit-learn", "perf4sight")


def library_versions() -> dict[str, str]:
    """Versions of the libraries a stored model depends on."""
    return {name: version(name) for name in ("scikit-learn", "skops", "numpy", "perf4sight")}


def model_path(storedir: str | Path, stage: str, target: str) -> Path:
    """Where the model for `stage` and `target` lives (its metadata is beside it, `.json`)."""
    return Path(storedir) / f"{stage}_{target}.skops"


@dataclass(frozen=True)
class FittedModel:
    """A loaded estimator with its metadata; predicts straight from an architecture."""

    estimator: Any
    metadata: dict[str, Any]

    @property
    def feature_names(self) -> list[str]:
        return list(self.metadata["feature_names"])

    def features(self, arch: Architecture, batch_sizes: Sequence[int]) -> pd.DataFrame:
        """The feature table this model was fitted on, for `arch` at each batch size."""
        return FEATURE_SETS[self.metadata["feature_set"]](arch, batch_sizes, self.metadata["stage"])

    def select(self, features: pd.DataFrame) -> pd.DataFrame:
        """The model's columns of a feature table, in its order (the table itself when it
        holds exactly those: selecting columns costs more than predicting)."""
        names = self.metadata["feature_names"]
        if features.columns.tolist() == names:
            return features
        return features[names]

    @cached_property
    def calibration(self) -> FamilyCalibration:
        """The model's errors on each profiled family (network), for queries of one of them."""
        return FamilyCalibration(self.metadata.get("family_residuals") or {})

    def predict(self, arch: Architecture, batch_sizes: Sequence[int], *, features: pd.DataFrame | None = None,
                family: str | None = None) -> tuple[np.ndarray, bool]:
        """Predicted target for `arch` at each batch size, calibrated on its family when that
        was profiled, and whether it was. `features` (from `features()`) can be passed to
        share one table between models of the same feature set, `family` (`family_key`) to
        compute it once for several models."""
        if features is None:
            features = self.features(arch, batch_sizes)
        predicted = self.estimator.predict(self.select(features))
        corrected = self.calibration.correct(family or family_key(arch), arch.params, np.asarray(batch_sizes), predicted)
        return (predicted, False) if corrected is None else (corrected, True)


def _ranges(dataset: Dataset) -> dict[str, list[float]]:
    columns = {name: dataset.features[name] for name in dataset.features.columns}
    columns["params"] = dataset.rows["params"]
    columns["batch_size"] = dataset.rows["batch_size"]
    columns["measured"] = dataset.rows["measured"]
    return {name: [float(values.min()), float(values.max())] for name, values in columns.items()}


# The reference network's input and batch sizes: small, with channel counts that are not
# multiples of the tiles and every kind of layer the feature sets weigh differently.
_PROBE_INPUT = (3, 20, 20)
_PROBE_BATCH_SIZES = (1, 5)
# Feature values may differ in their last bits between machines (summation order).
_PROBE_RTOL = 1e-9


def _probe_network() -> nn.Module:
    """The reference network whose features a stored model keeps (weights never used)."""
    return nn.Sequential(
        nn.Conv2d(3, 13, 3, padding=1), nn.BatchNorm2d(13), nn.ReLU(inplace=True),
        nn.Conv2d(13, 13, 3, padding=1, groups=13), nn.ReLU(),
        nn.Conv2d(13, 70, 1, bias=False), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(), nn.Linear(70, 7),
    )


def _feature_probe(feature_set: str, stage: str) -> tuple[tuple[float, ...], ...]:
    """The features of `feature_set` for the reference network, one row per batch size."""
    return _probe_features(FEATURE_SETS[feature_set], stage)


@cache
def _probe_features(features_of: Callable[..., pd.DataFrame], stage: str) -> tuple[tuple[float, ...], ...]:
    """`_feature_probe`, computed once per feature function and stage in a process (a
    predictor loads two models of one feature set)."""
    arch = load_architecture(_probe_network(), input_size=_PROBE_INPUT)
    return tuple(map(tuple, features_of(arch, _PROBE_BATCH_SIZES, stage).to_numpy(dtype=float)))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_model(estimator: Any, *, method: str, storedir: str | Path, stage: str, target: str,
               dataset: Dataset, bound_ratio: dict[str, Any] | None = None,
               calibration: FamilyCalibration | None = None, method_choice: dict[str, Any] | None = None) -> Path:
    """Store a fitted estimator and its metadata; returns the .skops path. `bound_ratio`
    (`held_out_ratio`'s) turns the model's predictions into bounds; `calibration` corrects
    queries of the profiled families; `method_choice` (`MethodChoice.as_dict`) says why
    `method = default` chose this method."""
    path = model_path(storedir, stage, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced(path) as temporary:
        skops.io.dump(estimator, temporary)
    metadata = {
        "format": _FORMAT,
        "method": method,
        "method_choice": method_choice,
        # how many training networks hold each layer group: a query with a group that fewer
        # than two (or than all, if fewer) held is extrapolated for it
        "layer_groups": networks_per_group(dataset.features, dataset.rows["net"]),
        "estimator": f"{type(estimator).__module__}.{type(estimator).__qualname__}",
        "feature_set": type(estimator).feature_set,
        "stage": stage,
        "target": target,
        "feature_names": [str(name) for name in dataset.features.columns],
        "n_train": len(dataset),
        "train_nets": sorted(dataset.rows["net"].unique().tolist()),
        "training_ranges": _ranges(dataset),
        "bound_ratio": bound_ratio,
        "family_residuals": {key: dict(runs) for key, runs in calibration.residuals.items()} if calibration else {},
        "versions": library_versions(),
        "feature_probe": _feature_probe(type(estimator).feature_set, stage),
        "sha256": _sha256(path.read_bytes()),
    }
    write_text(path.with_suffix(".json"), json.dumps(metadata, indent=2) + "\n")
    return path


def load_model(storedir: str | Path, *, stage: str, target: str) -> FittedModel:
    """Load the model for `stage` and `target`, refusing one that does not fit this run."""
    path = model_path(storedir, stage, target)
    meta_path = path.with_suffix(".json")
    if not path.is_file():
        raise DataNotFoundError(f"fitted model not found: {path} (fingerprint with evaluate = False first)")
    if not meta_path.is_file():  # a fit stopped between its two files
        raise FittedModelError(f"{path}: its metadata {meta_path.name} is missing; fingerprint again to refit")
    metadata = read_json(meta_path, what="fitted model metadata", error=FittedModelError)
    if not isinstance(metadata, dict) or "format" not in metadata:
        raise FittedModelError(f"{meta_path}: not perf4sight model metadata")
    if metadata["format"] != _FORMAT:
        raise FittedModelError(
            f"{meta_path}: stored in format {metadata['format']}, this perf4sight reads format {_FORMAT}; "
            "fingerprint again to refit"
        )
    for key, wanted in (("stage", stage), ("target", target)):
        if metadata.get(key) != wanted:
            raise FittedModelError(f"{path}: fitted for {key} '{metadata.get(key)}', this run needs '{wanted}'")
    current = library_versions()
    for name in _PINNED:
        stored = metadata.get("versions", {}).get(name)
        if stored != current[name]:
            raise FittedModelError(
                f"{path}: stored by {name} {stored}, this is {name} {current[name]}; fingerprint again to refit"
            )
    if metadata.get("method") not in METHODS:
        raise FittedModelError(f"{path}: method '{metadata.get('method')}' is not one of {', '.join(METHODS)}")
    data = path.read_bytes()  # checked and loaded from these same bytes
    if _sha256(data) != metadata.get("sha256"):
        raise FittedModelError(f"{path}: the model file does not match its metadata {meta_path.name}")
    trusted = trusted_types()
    untrusted = set(skops.io.get_untrusted_types(data=data)) - set(trusted)
    if untrusted:
        raise FittedModelError(f"{path}: holds types no perf4sight method uses: {', '.join(sorted(untrusted))}")
    estimator = skops.io.loads(data, trusted=trusted)
    expected = METHODS[metadata["method"]]
    if type(estimator) is not expected:
        raise FittedModelError(f"{path}: holds a {type(estimator).__name__}, method '{metadata['method']}' "
                               f"is a {expected.__name__}")
    _check_features(metadata, path)
    return FittedModel(estimator=estimator, metadata=metadata)


def _check_features(metadata: dict[str, Any], path: Path) -> None:
    """Refuse a model whose reference-network features this run computes differently."""
    stored = np.asarray(metadata.get("feature_probe"), dtype=float)
    current = np.asarray(_feature_probe(metadata["feature_set"], metadata["stage"]), dtype=float)
    if stored.shape != current.shape or not np.allclose(stored, current, rtol=_PROBE_RTOL, atol=0.0):
        raise FittedModelError(
            f"{path}: fitted on '{metadata['feature_set']}' features as another version of the code computed "
            "them; fingerprint again to refit"
        )
