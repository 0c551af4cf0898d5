"""Fitted models on disk: one skops file per device folder, stage and target, plus metadata.

`<model_storedir>/<stage>_<target>.skops` (the target by its name with unit:
`training_mem_used_mib.skops`) holds the fitted model, one `CalibratedModel`
(the method's regressor, its family corrections and its memory bound; skops, never a
pickle: only the types the methods declare are trusted when loading) and
`<stage>_<target>.json` what a later run needs to trust and use it: method, stage, target,
feature set and names, the ranges of the training data, the library versions, and the
features of a small reference network. The model carries its own identity too (stage,
target, feature set, method): a model file copied over another's, its hash fixed in the
metadata, still says what it is.
A model is refused when it was stored for another stage or target, by another
scikit-learn or perf4sight version, when its file no longer matches its metadata, when its
metadata is not what perf4sight writes (a wrong type, a NaN), or when this run computes
other features for the reference network than the fit did: features defined differently
would be fed to coefficients fitted on the old ones, silently. One half of a pair without
the other (or a folder in its place) is an error naming it, never a model skipped.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
import skops.io
from sklearn.pipeline import Pipeline
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator
from torch import nn

from perf4sight.cache import cached_architecture
from perf4sight.device.recipe import Recipe
from perf4sight.errors import ArgumentError, DataNotFoundError, FittedModelError, clip
from perf4sight.features import FEATURE_SETS
from perf4sight.features.network import networks_per_group
from perf4sight.fit.calibration import CalibratedModel, FamilyCalibration
from perf4sight.fit.dataset import Dataset
from perf4sight.fit.methods import METHODS, make_regressor, trusted_types
from perf4sight.files import read_json, replaced, write_text
from perf4sight.networks import load_architecture

__all__ = ["FittedModel", "library_versions", "stored_model_path", "save_model", "load_model"]

# 5: the reference network's features are stored (`feature_probe`); 6: the estimator's identity;
# 7: one object, the `CalibratedModel`, holds the family corrections and the bound, and the
# physical models hold their fitted solver (`solver_`); 8: targets named with their units
# (`training_mem_used_mib.skops`); 9: the regressor is a pipeline from a query frame (its features,
# term design and solver); 10: the training recipes the runs fitted on (`recipes`); 12: the
# method's fallback model (`fallback_`); 13: the device's PyTorch (`torch_version`); 14: depthwise
# convolutions' latency per operation
_FORMAT = 14
# The attribute of a stored model that names what it was fitted for (`_identity`).
_IDENTITY = "perf4sight_identity_"
# Versions that must match for a stored model to be used: the estimator's internals
# (scikit-learn) and the feature definitions (perf4sight).
_PINNED = ("scikit-learn", "perf4sight")
# The types a stored model holds besides its regressor's (`trusted_types`).
_MODEL_TYPES = tuple(f"{cls.__module__}.{cls.__qualname__}" for cls in (CalibratedModel, FamilyCalibration))


def library_versions() -> dict[str, str]:
    """Versions of the libraries a stored model depends on."""
    return {name: version(name) for name in ("scikit-learn", "skops", "numpy", "perf4sight")}


def stored_model_path(storedir: str | Path, stage: str, target: str) -> Path:
    """Where the model for `stage` and `target` lives (its metadata is beside it, `.json`)."""
    return Path(storedir) / f"{stage}_{target}.skops"


_Finite = Annotated[float, Field(allow_inf_nan=False)]
_Positive = Annotated[float, Field(allow_inf_nan=False, gt=0)]
_Name = Annotated[str, StringConstraints(min_length=1)]


class _Strict(BaseModel):
    """JSON types as written, no conversion ('1.5' is no number), no NaN or infinity, no
    field perf4sight does not write."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, frozen=True, extra="forbid")


class _Bound(_Strict):
    quantile: Annotated[float, Field(allow_inf_nan=False, gt=0, le=1)]
    ratio: _Positive
    left_out: _Name
    calibrated_ratio: _Positive | None


class _Residuals(_Strict):
    params: list[_Positive]
    batch_size: list[_Positive]
    log_ratio: list[_Finite]

    @model_validator(mode="after")
    def _aligned(self) -> _Residuals:
        if not len(self.params) == len(self.batch_size) == len(self.log_ratio) > 0:
            raise ValueError("params, batch_size and log_ratio are not lists of one equal, non-zero length")
        return self


class _MethodChoice(_Strict):
    """`method = default`'s choice as `MethodChoice.as_dict` writes it (an error that could not
    be measured is null)."""

    chosen: _Name
    errors: Annotated[dict[str, _Finite | None], Field(min_length=1)]
    left_out: _Name
    reason: str


class _Recipe(_Strict):
    """A training recipe as `Recipe.columns` writes it."""

    optimizer: _Name
    precision: _Name
    trainable: _Name
    checkpoint_segments: Annotated[int, Field(ge=0)]


class _Metadata(_Strict):
    """What `save_model` writes beside a model, every field checked at load: a tampered or
    damaged file is refused in one line instead of failing deep inside a prediction."""

    format: int
    method: _Name
    method_choice: _MethodChoice | None
    layer_groups: dict[str, Annotated[int, Field(ge=0)]]
    estimator: _Name
    feature_set: _Name
    stage: _Name
    target: _Name
    feature_names: Annotated[list[_Name], Field(min_length=1)]
    n_train: Annotated[int, Field(gt=0)]
    train_nets: list[_Name]
    training_ranges: dict[str, Annotated[list[_Finite], Field(min_length=2, max_length=2)]]
    versions: dict[str, str]
    feature_probe: Annotated[list[Annotated[list[_Finite], Field(min_length=1)]], Field(min_length=1)]
    recipes: Annotated[list[_Recipe], Field(min_length=1)]
    torch_version: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+")] | None
    torch_version_reason: str | None
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class _Content(_Strict):
    """What a stored model's bound and family corrections must be (`save_model` writes them
    from a fit; a file rewritten with, say, a NaN bound and its hash fixed is refused)."""

    bound_: _Bound | None
    family_residuals: dict[str, _Residuals]


def _check_metadata(metadata: Any, meta_path: Path) -> None:
    """Refuse metadata that `save_model` cannot have written, naming its first wrong field."""
    if not isinstance(metadata, dict) or "format" not in metadata:
        raise FittedModelError(f"{meta_path}: not perf4sight model metadata")
    if metadata["format"] != _FORMAT or type(metadata["format"]) is not int:
        raise FittedModelError(
            f"{meta_path}: stored in format {clip(repr(metadata['format']))}, this perf4sight reads format {_FORMAT}; "
            "fingerprint again to refit"
        )
    _validate(_Metadata, metadata, meta_path)


def _validate(schema: type[_Strict], data: dict[str, Any], path: Path) -> None:
    """Refuse `data` that `schema` does not hold, naming its first wrong field."""
    try:
        schema.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "metadata"
        raise FittedModelError(f"{path}: {where}: {error['msg']} (got {clip(repr(error['input']))}); "
                               "fingerprint again to refit") from None


@dataclass(frozen=True)
class FittedModel:
    """A loaded model with its metadata (the training ranges, layer groups and recipes, for
    the predictor's extrapolation checks)."""

    estimator: CalibratedModel
    metadata: dict[str, Any]

    @property
    def recipes(self) -> list[Recipe]:
        """The training recipes of the runs the model was fitted on."""
        return [Recipe(**columns) for columns in self.metadata["recipes"]]


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
    return tuple(map(tuple, _probe_features(FEATURE_SETS[feature_set], stage).to_numpy(dtype=float)))


@cache
def _probe_features(features_of: Callable[..., pd.DataFrame], stage: str) -> pd.DataFrame:
    """The reference network's feature table, computed once per feature function and stage
    in a process (a predictor loads two models of one feature set); its architecture is kept
    on disk (`perf4sight.cache`: a module is not keyed by the loader, but this one is defined
    here, in perf4sight's own source), so that loading a model records nothing again."""
    key = {"reference network": list(_PROBE_INPUT), "needs": features_of.needs.name, "stage": stage}
    arch = cached_architecture(key, lambda: load_architecture(_probe_network(), input_size=_PROBE_INPUT,
                                                              needs=features_of.needs, stage=stage))
    return features_of(arch, _PROBE_BATCH_SIZES, stage)


def _identity(*, stage: str, target: str, feature_set: str, method: str) -> dict[str, str]:
    """What a stored estimator says it was fitted for."""
    return {"stage": stage, "target": target, "feature_set": feature_set, "method": method}


def _describe(regressor: Pipeline) -> str:
    """The regressor's steps, by name and class: `features: FeatureTransformer > terms: TermDesign > ...`."""
    return " > ".join(f"{name}: {type(step).__name__}" for name, step in regressor.steps)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_model(model: CalibratedModel, *, storedir: str | Path, stage: str, target: str, dataset: Dataset,
               method_choice: dict[str, Any] | None = None, torch_version_reason: str | None = None) -> Path:
    """Store a fitted model (fitted on `dataset`) and its metadata; returns the .skops
    path. `method_choice` (`MethodChoice.as_dict`) says why `method = default` chose its
    method, `torch_version_reason` where the device's PyTorch (`model.torch_version`) was said."""
    for key, value, fitted_for in (("stage", stage, model.stage), ("target", target, model.target)):
        if value != fitted_for:
            raise ArgumentError(f"{key} {value}: the model was fitted for {fitted_for}")
    path = stored_model_path(storedir, stage, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    method, feature_set = model.method, model.feature_set
    labelled = copy.copy(model)  # the caller's model is left as it was
    setattr(labelled, _IDENTITY, _identity(stage=stage, target=target, feature_set=feature_set, method=method))
    with replaced(path) as temporary:
        skops.io.dump(labelled, temporary)
    metadata = {
        "format": _FORMAT,
        "method": method,
        "method_choice": method_choice,
        # how many training networks hold each layer group: a query with a group that fewer
        # than two (or than all, if fewer) held is extrapolated for it
        "layer_groups": networks_per_group(dataset.features, dataset.rows["net"]),
        "estimator": _describe(model.regressor_),
        "feature_set": feature_set,
        "stage": stage,
        "target": target,
        "feature_names": [str(name) for name in dataset.features.columns],
        "n_train": len(dataset),
        "train_nets": sorted(dataset.rows["net"].unique().tolist()),
        "training_ranges": _ranges(dataset),
        "versions": library_versions(),
        "feature_probe": _feature_probe(feature_set, stage),
        # the recipes the training runs ran: what a prediction under another one extrapolates from
        "recipes": [recipe.columns() for recipe in dataset.recipes()],
        # the device's PyTorch, as its features count what autograd saves (None: the host's)
        "torch_version": model.torch_version,
        "torch_version_reason": torch_version_reason,
        "sha256": _sha256(path.read_bytes()),
    }
    write_text(path.with_suffix(".json"), json.dumps(metadata, indent=2) + "\n")
    return path


def load_model(storedir: str | Path, *, stage: str, target: str) -> FittedModel:
    """Load the model for `stage` and `target`, refusing one that does not fit this run.

    DataNotFoundError when neither file of the pair is there (no such model was fitted);
    FittedModelError for anything else that is not a whole, matching pair."""
    path = stored_model_path(storedir, stage, target)
    meta_path = path.with_suffix(".json")
    present = [p for p in (path, meta_path) if p.exists() or p.is_symlink()]
    if not present:
        raise DataNotFoundError(f"fitted model not found: {path} (fingerprint with evaluate = False first)")
    for file in present:
        if not file.is_file():
            raise FittedModelError(f"{file}: not a file (a stored model is two files, {path.name} and "
                                   f"{meta_path.name}); remove it and fingerprint again")
    if not path.exists():
        raise FittedModelError(f"{meta_path}: its model {path.name} is missing; fingerprint again to refit")
    if not meta_path.exists():  # a fit stopped between its two files
        raise FittedModelError(f"{path}: its metadata {meta_path.name} is missing; fingerprint again to refit")
    metadata = read_json(meta_path, what="fitted model metadata", error=FittedModelError)
    _check_metadata(metadata, meta_path)
    for key, wanted in (("stage", stage), ("target", target)):
        if metadata[key] != wanted:
            raise FittedModelError(f"{path}: fitted for {key} '{clip(metadata[key])}', this run needs '{wanted}'")
    current = library_versions()
    for name in _PINNED:
        stored = metadata["versions"].get(name)
        if stored != current[name]:
            raise FittedModelError(
                f"{path}: stored by {name} {clip(str(stored))}, this is {name} {current[name]}; fingerprint again to refit"
            )
    method = metadata["method"]
    if method not in METHODS:
        raise FittedModelError(f"{path}: method '{clip(method)}' is not one of {', '.join(METHODS)}")
    expected = METHODS[method]
    if metadata["feature_set"] != expected.feature_set:
        raise FittedModelError(f"{meta_path}: feature set '{clip(metadata['feature_set'])}', method '{method}' is "
                               f"fitted on '{expected.feature_set}'")
    data = path.read_bytes()  # checked and loaded from these same bytes
    if _sha256(data) != metadata["sha256"]:
        raise FittedModelError(f"{path}: the model file does not match its metadata {meta_path.name}")
    estimator = _load_estimator(data, path)
    wanted_identity = _identity(stage=stage, target=target, feature_set=expected.feature_set, method=method)
    identity = getattr(estimator, _IDENTITY, None)
    if identity != wanted_identity:
        said = ", ".join(f"{k} {v}" for k, v in identity.items()) if isinstance(identity, dict) else "nothing"
        raise FittedModelError(f"{path}: the model inside says it was fitted for {clip(said)}; its name and "
                               f"{meta_path.name} say {', '.join(f'{k} {v}' for k, v in wanted_identity.items())}")
    torch_version = metadata["torch_version"]
    _check_content(estimator, method, stage, target, torch_version, path)
    fallback = getattr(estimator, "fallback_", "missing")
    if expected.fallback is None:
        if fallback is not None:
            raise FittedModelError(f"{path}: holds a fallback model; method '{method}' has none")
    elif type(fallback) is not CalibratedModel or fallback.method != expected.fallback:
        raise FittedModelError(f"{path}: its fallback is not a '{expected.fallback}' model; fingerprint again to refit")
    else:
        _check_content(fallback, expected.fallback, stage, target, torch_version, path)
    _check_features(metadata, path)
    return FittedModel(estimator=estimator, metadata=metadata)


def _check_content(estimator: Any, method: str, stage: str, target: str, torch_version: str | None,
                   path: Path) -> None:
    """Refuse a stored model (or fallback) whose regressor is not `method`'s for the device's
    PyTorch `torch_version` (its metadata's), or whose bound or family corrections are not
    what a fit makes."""
    if type(estimator) is CalibratedModel and getattr(estimator, "torch_version", "missing") != torch_version:
        raise FittedModelError(f"{path}: fitted for PyTorch {clip(repr(getattr(estimator, 'torch_version', None)))}, "
                               f"its metadata says {clip(repr(torch_version))}; fingerprint again to refit")
    problem = _regressor_problem(estimator, make_regressor(method, target, stage, torch_version), method)
    if problem:
        raise FittedModelError(f"{path}: {problem}")
    calibration = getattr(estimator, "calibration_", None)
    _validate(_Content, {
        "bound_": getattr(estimator, "bound_", "missing"),
        "family_residuals": calibration.residuals if type(calibration) is FamilyCalibration else "missing",
    }, path)


def _regressor_problem(estimator: Any, wanted: Pipeline, method: str) -> str | None:
    """Why `estimator` is not a `CalibratedModel` holding a pipeline of `wanted`'s steps
    (their names, classes and parameters); None when it is one."""
    regressor = getattr(estimator, "regressor_", None)
    if type(estimator) is not CalibratedModel or type(regressor) is not Pipeline \
            or [(name, type(step)) for name, step in regressor.steps] != [(name, type(step)) for name, step in wanted.steps]:
        held = _describe(regressor) if type(regressor) is Pipeline else type(
            regressor if type(estimator) is CalibratedModel else estimator).__name__
        return f"holds {clip(held)}; method '{method}' is {_describe(wanted)} in a {CalibratedModel.__name__}"
    for (name, step), (_, want) in zip(regressor.steps, wanted.steps):
        if step.get_params(deep=False) != want.get_params(deep=False):
            return (f"its step '{name}' has parameters {clip(repr(step.get_params(deep=False)))}, method '{method}' "
                    f"has {clip(repr(want.get_params(deep=False)))}; fingerprint again to refit")
    return None


def _load_estimator(data: bytes, path: Path) -> Any:
    """The estimator in a skops file's bytes, loading only the types the methods declare."""
    if not data or not zipfile.is_zipfile(io.BytesIO(data)):
        raise FittedModelError(f"{path}: not a skops file ({'empty' if not data else 'not a zip archive'}); "
                               "fingerprint again to refit")
    trusted = [*trusted_types(), *_MODEL_TYPES]
    try:
        untrusted = set(skops.io.get_untrusted_types(data=data)) - set(trusted)
        if untrusted:
            raise FittedModelError(f"{path}: holds types no perf4sight method uses: {', '.join(sorted(untrusted))}")
        return skops.io.loads(data, trusted=trusted)
    except FittedModelError:
        raise
    except Exception as exc:  # a damaged archive: skops raises whatever its parsing met
        raise FittedModelError(f"{path}: not a readable skops file ({type(exc).__name__}: {clip(str(exc))}); "
                               "fingerprint again to refit") from None


def _check_features(metadata: dict[str, Any], path: Path) -> None:
    """Refuse a model whose reference-network features this run computes differently, or
    whose feature names are not those of its feature set."""
    table = _probe_features(FEATURE_SETS[metadata["feature_set"]], metadata["stage"])
    unknown = [name for name in metadata["feature_names"] if name not in table.columns]
    if unknown:
        raise FittedModelError(f"{path}: feature {clip(repr(unknown[0]))} is not one of the "
                               f"'{metadata['feature_set']}' features; fingerprint again to refit")
    stored = metadata["feature_probe"]
    current = table.to_numpy(dtype=float)
    if len({len(row) for row in stored}) != 1 or np.shape(stored) != current.shape \
            or not np.allclose(stored, current, rtol=_PROBE_RTOL, atol=0.0):
        raise FittedModelError(
            f"{path}: fitted on '{metadata['feature_set']}' features as another version of the code computed "
            "them; fingerprint again to refit"
        )
