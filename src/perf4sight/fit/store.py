"""Fitted models on disk: one skops file per device folder, stage and target, plus a header.

`<model_storedir>/<stage>_<target>.skops` (the target by its name with unit:
`training_mem_used_mib.skops`) holds the fitted model, one `CalibratedModel` with everything
a prediction reads (the method's regressor, its family corrections, its memory bound, the
training ranges, layer groups, recipes and networks, why its method and PyTorch were chosen;
skops, never a pickle: only the types the methods declare are trusted when loading), and
`<stage>_<target>.json` a header: the format, what the model is (stage, target, method,
feature set), the fingerprint it belongs to (`Fingerprint`: device, campaign, fitted at),
the library versions, the features of a small reference network, and one sha256 over the
model's bytes and the rest of the header.
A model is refused when it was stored in another format, for another stage or target, by
another scikit-learn or perf4sight version, when the hash does not match the pair, when the
model inside says it is another than its header does, when its content is not what a fit
makes (a wrong type, a NaN), or when this run computes other features for the reference
network than the fit did: features defined differently would be fed to coefficients fitted
on the old ones, silently. One half of a pair without the other (or a folder in its place)
is an error naming it, never a model skipped; a folder's models of different fingerprints
are never combined (`load_models`). A fingerprint's models are stored as one set
(`save_models`): killed at any moment, the folder holds its old models or all the new ones;
and one fingerprint at a time writes into a folder (`model_folder_lock`).
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
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
from perf4sight.device.definitions import QUANTITIES
from perf4sight.errors import DataNotFoundError, FittedModelError, clip
from perf4sight.features import FEATURE_SETS, with_device_costs
from perf4sight.fit.calibration import CalibratedModel, FamilyCalibration
from perf4sight.fit.methods import METHODS, make_regressor, trusted_types
from perf4sight.device.lock import FolderLock
from perf4sight.files import current_file, read_json, write_together
from perf4sight.networks import load_architecture

__all__ = ["Fingerprint", "library_versions", "load_model", "load_models", "model_folder_lock", "model_hash", "save_models",
           "stored_model_path"]

# 5: the reference network's features are stored (`feature_probe`); 6: the estimator's identity;
# 7: one object, the `CalibratedModel`, holds the family corrections and the bound, and the
# physical models hold their fitted solver (`solver_`); 8: targets named with their units
# (`training_mem_used_mib.skops`); 9: the regressor is a pipeline from a query frame (its features,
# term design and solver); 10: the training recipes the runs fitted on (`recipes`); 12: the
# method's fallback model (`fallback_`); 13: the device's PyTorch (`torch_version`); 14: depthwise
# convolutions' latency per operation; 15: the estimator holds what a prediction reads (training
# ranges, layer groups, recipes, networks, the method's choice), the header the fingerprint's
# identity, and the hash covers both; 16: what profiling the training runs cost (`campaign_`);
# 17: depthwise convolutions' latency per byte, the parameters' passes at a rate of their own;
# 18: gradients in fresh pages at the device's measured cost (`fresh_pages_ms_per_mib`); 19: the
# optimizer's temporaries of large weights in fresh pages too; 20: the gradients the allocator's
# heap serves, a memory term; 21: a footprint per kind of layer, and both counted on a CPU only;
# 22: pooling's bytes at a rate of their own; 23: the planes of grouped and depthwise convolutions,
# a footprint per distinct convolution; 24: where the step clears the gradients (the recipe's
# `zero_grad`); 25: a CPU's step temporaries beside the activations; 26: a CPU's copies of the
# largest layer's tensors (the `copies` method); 27: `planes` prices depthwise taps; 28: the C
# library's heap holes from a lifetime replay (the `heap` method); 29: `planes` prices the Linear
# layers' GEMMs at a rate of their own
_FORMAT = 29
# Versions that must match for a stored model to be used: the estimator's internals
# (scikit-learn) and the feature definitions (perf4sight).
_PINNED = ("scikit-learn", "perf4sight")
# Held by a fingerprint in its model folder (`model_folder_lock`).
_LOCK_FILE = "fingerprint.lock"
# The types a stored model holds besides its regressor's (`trusted_types`).
_MODEL_TYPES = tuple(f"{cls.__module__}.{cls.__qualname__}" for cls in (CalibratedModel, FamilyCalibration, Recipe))


def library_versions() -> dict[str, str]:
    """Versions of the libraries a stored model depends on."""
    return {name: version(name) for name in ("scikit-learn", "skops", "numpy", "perf4sight")}


def stored_model_path(storedir: str | Path, stage: str, target: str) -> Path:
    """Where the model for `stage` and `target` lives (its header is beside it, `.json`)."""
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
    zero_grad: _Name


class _Fingerprint(_Strict):
    device: _Name
    campaign: _Name
    fitted_at: _Name


class _Header(_Strict):
    """What `save_model` writes beside a model, every field checked at load: a tampered or
    damaged file is refused in one line instead of failing deep inside a prediction."""

    format: int
    stage: _Name
    target: _Name
    method: _Name
    feature_set: _Name
    estimator: _Name
    fingerprint: _Fingerprint
    versions: dict[str, str]
    feature_probe: Annotated[list[Annotated[list[_Finite], Field(min_length=1)]], Field(min_length=1)]
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class _Content(_Strict):
    """What a stored model's fitted attributes must be (a fit makes them; a file rewritten
    with, say, a NaN bound and its hash fixed is refused)."""

    bound_: _Bound | None
    family_residuals: dict[str, _Residuals]
    feature_names_: Annotated[list[_Name], Field(min_length=1)]
    training_ranges_: dict[str, Annotated[tuple[_Finite, _Finite], Field()]]
    layer_groups_: dict[str, Annotated[int, Field(ge=0)]]
    recipes_: Annotated[list[_Recipe], Field(min_length=1)]
    train_nets_: Annotated[list[_Name], Field(min_length=1)]
    method_choice_: _MethodChoice | None
    torch_version: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+")] | None
    torch_version_reason: str | None
    fresh_pages_ms_per_mib: Annotated[_Finite, Field(ge=0)] | None


def _check_header(header: Any, meta_path: Path) -> None:
    """Refuse a header that `save_model` cannot have written, naming its first wrong field; a
    model stored in another format is refused first, whatever else it holds."""
    if not isinstance(header, dict) or "format" not in header:
        raise FittedModelError(f"{meta_path}: not a perf4sight model header")
    if header["format"] != _FORMAT or type(header["format"]) is not int:
        raise FittedModelError(
            f"{meta_path}: stored in format {clip(repr(header['format']))}, this perf4sight reads format {_FORMAT}; "
            "fingerprint again to refit"
        )
    _validate(_Header, header, meta_path)


def _validate(schema: type[_Strict], data: dict[str, Any], path: Path) -> None:
    """Refuse `data` that `schema` does not hold, naming its first wrong field."""
    try:
        schema.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "header"
        raise FittedModelError(f"{path}: {where}: {error['msg']} (got {clip(repr(error['input']))}); "
                               "fingerprint again to refit") from None


@dataclass(frozen=True)
class Fingerprint:
    """Which fingerprint a stored model belongs to: the device (as its campaign's environment
    records name it), the campaign (its records, or its log folders where it has none) and
    when the model was fitted (UTC). A folder's models of two devices or campaigns are not
    combined (`load_models`)."""

    device: str
    campaign: str
    fitted_at: str

    def same(self, other: Fingerprint) -> bool:
        """Whether two models describe the same measurements: one device and campaign."""
        return (self.device, self.campaign) == (other.device, other.campaign)

    def describe(self) -> str:
        """One line for messages."""
        return f"device {self.device}, campaign {self.campaign}, fitted at {self.fitted_at}"


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
    """The reference network's feature table with the device's costs priced (at none: the
    columns a model's features step computes), computed once per feature function and stage
    in a process (a predictor loads two models of one feature set); its architecture is kept
    on disk (`perf4sight.cache`: a module is not keyed by the loader, but this one is defined
    here, in perf4sight's own source), so that loading a model records nothing again."""
    key = {"reference network": list(_PROBE_INPUT), "needs": features_of.needs.name, "stage": stage}
    arch = cached_architecture(key, lambda: load_architecture(_probe_network(), input_size=_PROBE_INPUT,
                                                              needs=features_of.needs, stage=stage))
    return with_device_costs(features_of(arch, _PROBE_BATCH_SIZES, stage), None)


def _describe(regressor: Pipeline) -> str:
    """The regressor's steps, by name and class: `features: FeatureTransformer > terms: TermDesign > ...`."""
    return " > ".join(f"{name}: {type(step).__name__}" for name, step in regressor.steps)


def model_hash(data: bytes, header: dict[str, Any]) -> str:
    """The sha256 of a stored model: its bytes and every field of its header but the hash."""
    fields = {key: value for key, value in header.items() if key != "sha256"}
    return hashlib.sha256(data + json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _what(model: Any) -> dict[str, Any]:
    """What a stored estimator says it is."""
    return {name: getattr(model, name, None) for name in ("stage", "target", "method", "feature_set")}


def save_models(models: Sequence[CalibratedModel], *, storedir: str | Path, fingerprint: Fingerprint) -> list[Path]:
    """Store fitted models, each with its header (the model's identity and `fingerprint`'s),
    as one set: a reader of the folder sees its old models or all of these, whatever is
    killed when (`files.write_together`); the caller holds the folder's lock
    (`model_folder_lock`). Returns the .skops paths."""
    files: dict[Path, bytes] = {}
    for model in models:
        path = stored_model_path(storedir, model.stage, model.target)
        data = skops.io.dumps(model)
        header = {
            "format": _FORMAT,
            **_what(model),
            "estimator": _describe(model.regressor_),
            "fingerprint": asdict(fingerprint),
            "versions": library_versions(),
            "feature_probe": _feature_probe(model.feature_set, model.stage),
        }
        header["sha256"] = model_hash(data, header)
        files[path] = data
        files[path.with_suffix(".json")] = (json.dumps(header, indent=2) + "\n").encode("utf-8")
    write_together(files)
    return [path for path in files if path.suffix == ".skops"]


def model_folder_lock(storedir: str | Path) -> FolderLock:
    """The lock a fingerprint holds on its model folder while it fits and stores: a second
    one is refused (FolderBusyError), rather than each replacing the other's models."""
    return FolderLock(Path(storedir), _LOCK_FILE, "{folder}: another fingerprint (pid {pid}) is fitting models into "
                                                  "this folder; wait for it to end or give another model_storedir")


def load_models(storedir: str | Path, *, stage: str) -> dict[str, CalibratedModel]:
    """Whichever of the memory and latency models `storedir` holds, by target name (none is
    an empty dict); models of two fingerprints (`Fingerprint.same`) are refused, naming both."""
    found: dict[str, tuple[CalibratedModel, Fingerprint]] = {}
    for quantity in QUANTITIES:
        try:
            found[quantity.name] = _load(storedir, stage=stage, target=quantity.name)
        except DataNotFoundError:
            continue
    names = list(found)
    for first, name in zip(names, names[1:]):
        ours, theirs = found[first][1], found[name][1]
        if not theirs.same(ours):
            raise FittedModelError(
                f"{storedir}: its {first} model is of another fingerprint than its {name} model "
                f"({ours.describe()}; {theirs.describe()}); fingerprint both again into one folder")
    return {name: model for name, (model, _) in found.items()}


def load_model(storedir: str | Path, *, stage: str, target: str) -> CalibratedModel:
    """Load the model for `stage` and `target`, refusing one that does not fit this run.

    DataNotFoundError when neither file of the pair is there (no such model was fitted);
    FittedModelError for anything else that is not a whole, matching pair."""
    return _load(storedir, stage=stage, target=target)[0]


def _load(storedir: str | Path, *, stage: str, target: str) -> tuple[CalibratedModel, Fingerprint]:
    """`load_model`'s model and the fingerprint its header names."""
    named = stored_model_path(storedir, stage, target)
    path, meta_path = current_file(named), current_file(named.with_suffix(".json"))
    present = [p for p in (path, meta_path) if p.exists() or p.is_symlink()]
    if not present:
        raise DataNotFoundError(f"fitted model not found: {path} (fingerprint with evaluate = False first)")
    for file in present:
        if not file.is_file():
            raise FittedModelError(f"{file}: not a file (a stored model is two files, {path.name} and "
                                   f"{meta_path.name}); remove it and fingerprint again")
    if not path.exists():
        raise FittedModelError(f"{meta_path}: its model {path.name} is missing; fingerprint again to refit")
    if not meta_path.exists():
        raise FittedModelError(f"{path}: its header {meta_path.name} is missing; fingerprint again to refit")
    header = read_json(meta_path, what="fitted model header", error=FittedModelError)
    _check_header(header, meta_path)
    for key, wanted in (("stage", stage), ("target", target)):
        if header[key] != wanted:
            raise FittedModelError(f"{path}: fitted for {key} '{clip(header[key])}', this run needs '{wanted}'")
    current = library_versions()
    for name in _PINNED:
        stored = header["versions"].get(name)
        if stored != current[name]:
            raise FittedModelError(
                f"{path}: stored by {name} {clip(str(stored))}, this is {name} {current[name]}; fingerprint again to refit"
            )
    method = header["method"]
    if method not in METHODS:
        raise FittedModelError(f"{path}: method '{clip(method)}' is not one of {', '.join(METHODS)}")
    expected = METHODS[method]
    if header["feature_set"] != expected.feature_set:
        raise FittedModelError(f"{meta_path}: feature set '{clip(header['feature_set'])}', method '{method}' is "
                               f"fitted on '{expected.feature_set}'")
    data = path.read_bytes()  # checked and loaded from these same bytes
    if model_hash(data, header) != header["sha256"]:
        raise FittedModelError(f"{path}: the model file and its header {meta_path.name} do not match each other "
                               "(one of them was changed or replaced); fingerprint again to refit")
    estimator = _load_estimator(data, path)
    wanted = {key: header[key] for key in ("stage", "target", "method", "feature_set")}
    said = _what(estimator) if type(estimator) is CalibratedModel else None
    if said != wanted:
        inside = ", ".join(f"{k} {v}" for k, v in said.items()) if said else f"nothing (a {type(estimator).__name__})"
        raise FittedModelError(f"{path}: the model inside says it was fitted for {clip(inside)}; its name and "
                               f"{meta_path.name} say {', '.join(f'{k} {v}' for k, v in wanted.items())}")
    _check_content(estimator, method, stage, target, path)
    fallback = getattr(estimator, "fallback_", "missing")
    if expected.fallback is None:
        if fallback is not None:
            raise FittedModelError(f"{path}: holds a fallback model; method '{method}' has none")
    elif type(fallback) is not CalibratedModel or fallback.method != expected.fallback \
            or fallback.torch_version != estimator.torch_version \
            or fallback.fresh_pages_ms_per_mib != estimator.fresh_pages_ms_per_mib:
        raise FittedModelError(f"{path}: its fallback is not a '{expected.fallback}' model of the same device; "
                               "fingerprint again to refit")
    else:
        _check_content(fallback, expected.fallback, stage, target, path)
    _check_features(estimator, header, path)
    return estimator, Fingerprint(**header["fingerprint"])


def _check_content(estimator: CalibratedModel, method: str, stage: str, target: str, path: Path) -> None:
    """Refuse a stored model (or fallback) whose regressor is not `method`'s for its own
    device (`torch_version`, `fresh_pages_ms_per_mib`), or whose fitted attributes are not what
    a fit makes."""
    torch_version = getattr(estimator, "torch_version", "missing")
    if torch_version is not None and type(torch_version) is not str:
        raise FittedModelError(f"{path}: torch_version {clip(repr(torch_version))} is not a PyTorch version; "
                               "fingerprint again to refit")
    fresh_pages = getattr(estimator, "fresh_pages_ms_per_mib", "missing")
    if fresh_pages is not None and (type(fresh_pages) is not float or not 0 <= fresh_pages < float("inf")):
        raise FittedModelError(f"{path}: fresh_pages_ms_per_mib {clip(repr(fresh_pages))} is not a cost in ms; "
                               "fingerprint again to refit")
    problem = _regressor_problem(estimator, make_regressor(method, target, stage, torch_version, fresh_pages), method)
    if problem:
        raise FittedModelError(f"{path}: {problem}")
    calibration = getattr(estimator, "calibration_", None)
    recipes = getattr(estimator, "recipes_", "missing")
    _validate(_Content, {
        **{name: getattr(estimator, name, "missing") for name in _Content.model_fields if name != "family_residuals"},
        "family_residuals": calibration.residuals if type(calibration) is FamilyCalibration else "missing",
        "recipes_": [recipe.columns() if type(recipe) is Recipe else recipe for recipe in recipes]
        if type(recipes) is list else recipes,
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
        held, wants = step.get_params(deep=False), want.get_params(deep=False)
        differ = sorted(key for key in {*held, *wants} if held.get(key, "missing") != wants.get(key, "missing"))
        if differ:
            return (f"its step '{name}' has {clip(', '.join(f'{key}={held.get(key)!r}' for key in differ))}, "
                    f"method '{method}' has {clip(', '.join(f'{key}={wants.get(key)!r}' for key in differ))}; "
                    "fingerprint again to refit")
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


def _check_features(estimator: CalibratedModel, header: dict[str, Any], path: Path) -> None:
    """Refuse a model whose reference-network features this run computes differently, or
    whose feature names are not those of its feature set."""
    feature_set = estimator.feature_set
    table = _probe_features(FEATURE_SETS[feature_set], estimator.stage)
    unknown = [name for name in estimator.feature_names_ if name not in table.columns]
    if unknown:
        raise FittedModelError(f"{path}: feature {clip(repr(unknown[0]))} is not one of the "
                               f"'{feature_set}' features; fingerprint again to refit")
    stored = header["feature_probe"]
    current = table.to_numpy(dtype=float)
    if len({len(row) for row in stored}) != 1 or np.shape(stored) != current.shape \
            or not np.allclose(stored, current, rtol=_PROBE_RTOL, atol=0.0):
        raise FittedModelError(
            f"{path}: fitted on '{feature_set}' features as another version of the code computed "
            "them; fingerprint again to refit"
        )
