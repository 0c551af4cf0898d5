"""Fingerprint a device: fit memory and latency models on its logs, store them, evaluate them.

The original tool's semantics: with `evaluate = False` a model is fitted per enabled target
(`memory_model`, `latency_model`) unless one is already stored and `overwrite` is False;
then the models are evaluated on `eval_nets` x `eval_logs`. With `evaluate = True` the
stored models are only evaluated. Evaluation logs default to the training log folders and
evaluation networks to the training networks. Each model is a `CalibratedModel`: the
method's regressor with its errors on each training family (`FamilyCalibration`), which
correct the predictions of that family's other pruning levels, in the evaluation as for a
user's query, and for memory its bound (`held_out_ratio`): how far above the prediction the
runs of a network left out of the fit measured. With `method = default` each target's
method is chosen from the device's own data (`perf4sight.fit.choice`); the choice, every
candidate's error and the reason are stored with the model (`method_choice_`) and reported.
The models of one run carry its fingerprint (`Fingerprint`: the device and campaign its
logs' environment records name, and when it was fitted). The
features count what autograd saves on the device's PyTorch (`torch_version`, or the version
its profiler recorded beside the logs; `perf4sight.architecture.autograd`); where neither
says, the memory runs choose between the ways versions save (`choose_torch_version`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from perf4sight import console
from perf4sight.architecture import BEFORE_COPIES, check_torch_version, copies_inputs
from perf4sight.config import FingerprintSettings
from perf4sight.device.definitions import MEMORY, QUANTITIES, Quantity, check_stage
from perf4sight.errors import ArgumentError, DataNotFoundError, FittedModelError, LogFormatError
from perf4sight.features import ARCHITECTURE
from perf4sight.fit.bound import BOUND_QUANTILE
from perf4sight.fit.calibration import CalibratedModel
from perf4sight.fit.choice import MethodChoice, choose_method, choose_torch_version, holds_copies
from perf4sight.fit.dataset import ArchitectureCatalog, Dataset, build_dataset, logged_recipes, row_recipes
from perf4sight.fit.logs import campaign_cost, device_fresh_pages, find_logs, read_logs, recorded_environments
from perf4sight.fit.methods import DEFAULT_METHOD, METHODS, candidate_methods, method_problem, resolve_method
from perf4sight.fit.report import print_report, summarise, write_report
from perf4sight.fit.store import Fingerprint, load_model, model_folder_lock, save_models, stored_model_path

__all__ = ["check_settings", "fingerprint_device"]


def _log_dirs(settings: FingerprintSettings, kind: str, *, evaluation: bool) -> list[Path]:
    train_dirs = getattr(settings, f"{kind}_logs")
    dirs = (getattr(settings, f"eval_{kind}_logs") or train_dirs) if evaluation else train_dirs
    if not dirs:
        key = f"eval_{kind}_logs or {kind}_logs" if evaluation else f"{kind}_logs"
        raise ArgumentError(f"{key}: no log folder given for the {kind} model")
    return dirs


def _train(settings: FingerprintSettings, target: Quantity, method: str,
           catalog: ArchitectureCatalog) -> tuple[CalibratedModel, list[Path]] | None:
    """The model of `target` fitted on its logs, and the log folders it read; None when the
    stored one is kept."""
    path = stored_model_path(settings.model_storedir, settings.stage, target.name)
    if path.is_file() and not settings.overwrite:
        try:
            load_model(settings.model_storedir, stage=settings.stage, target=target.name)
        except FittedModelError as exc:  # stored by another version: of no use to keep
            console.info(f"the stored {target.kind} model cannot be used ({exc}); refitting it")
        else:
            console.info(f"{target.kind} model already stored at {path}; kept (overwrite = False)")
            return None
    candidates = candidate_methods(target.name) if method == DEFAULT_METHOD else (method,)
    dirs = _log_dirs(settings, target.kind, evaluation=False)
    logs = read_logs(settings.train_nets, settings.train_logs, dirs, [target])
    torch_version, reason = _device_torch(settings, dirs)
    fresh_pages = device_fresh_pages(dirs)
    recipes = logged_recipes(logs[logs["passed"]])
    excluded = {candidate: problem for candidate in candidates
                if (problem := method_problem(candidate, recipes)) is not None}
    if method != DEFAULT_METHOD and excluded:
        raise ArgumentError(f"method: '{method}' cannot be fitted on these {target.kind} logs: {excluded[method]} "
                            f"(method = physical or default can)")

    def fitted(version: str | None) -> tuple[dict[str, Dataset], MethodChoice | None]:
        """Each candidate's training rows as autograd on `version` saves them (built once per
        feature set: candidates that differ in their terms only share them), and the choice."""
        fitting = [c for c in candidates if c not in excluded]
        by_feature_set = {feature_set: build_dataset(logs, target=target.name, feature_set=feature_set,
                                                     stage=settings.stage, catalog=catalog, torch_version=version,
                                                     fresh_pages_ms_per_mib=fresh_pages)
                          for feature_set in dict.fromkeys(METHODS[c].feature_set for c in fitting)}
        for dataset in by_feature_set.values():
            _check_positive(dataset, target)
        datasets = {c: by_feature_set[METHODS[c].feature_set] for c in fitting}
        return datasets, choose_method(datasets, target.name, excluded) if method == DEFAULT_METHOD else None

    datasets, choice = fitted(torch_version)
    if reason is None and target == MEMORY and holds_copies(next(iter(datasets.values()))):
        fits = {None: (datasets, choice), BEFORE_COPIES: fitted(BEFORE_COPIES)}
        torch_version, reason = choose_torch_version(fits, method, target.name)
        datasets, choice = fits[torch_version]
    if choice is not None:
        method = choice.chosen
    dataset = datasets[method]
    console.info(f"fitting the {target.kind} model ({method}) on {len(dataset)} rows")
    model = CalibratedModel(method, target.name, settings.stage,
                            bound_quantile=BOUND_QUANTILE if target == MEMORY else None, fallback=METHODS[method].fallback,
                            torch_version=torch_version, torch_version_reason=reason,
                            fresh_pages_ms_per_mib=fresh_pages)
    bound = model.fit(dataset.rows, dataset.target, method_choice=choice.as_dict() if choice is not None else None,
                      campaign=campaign_cost(logs)).bound_
    if bound is not None:
        in_family = bound["calibrated_ratio"]
        console.info(f"{bound['quantile']:.0%} of runs measured at most {bound['ratio']:.3f}x their prediction "
                     f"with their {bound['left_out']} left out of the fit: the memory bound"
                     + (f" ({in_family:.3f}x for another level of a profiled network)" if in_family else ""))
    return model, dirs


def _store(settings: FingerprintSettings, fitted: list[tuple[CalibratedModel, list[Path]]]) -> None:
    """Store the models fitted in one run as one set, of one fingerprint (the log folders of all)."""
    if not fitted:
        return
    dirs = list(dict.fromkeys(d for _, model_dirs in fitted for d in model_dirs))
    paths = save_models([model for model, _ in fitted], storedir=settings.model_storedir, fingerprint=_fingerprint(dirs))
    console.info("stored " + ", ".join(f"the {model.target} model at {path}" for (model, _), path in zip(fitted, paths)))


def _fingerprint(log_dirs: list[Path]) -> Fingerprint:
    """The fingerprint of a model fitted now on `log_dirs`: the device and campaign their
    environment records name (the records' names; the log folders' parents where there are none)."""
    records = recorded_environments(log_dirs)
    devices = {environment.device for environment in records.values() if environment.device}
    campaign = sorted(record.name for record in records) or sorted({str(d.resolve().parent) for d in log_dirs})
    return Fingerprint(device=", ".join(sorted(devices)) or "not recorded", campaign=", ".join(campaign),
                       fitted_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def _device_torch(settings: FingerprintSettings, log_dirs: list[Path]) -> tuple[str | None, str | None]:
    """The device's PyTorch, which decides what autograd saves, and where that was said:
    `torch_version`, else the version its profiler recorded beside the logs (the latest); else
    None and None (nothing said: counted as the host's saves, unless the runs say otherwise)."""
    if settings.torch_version is not None:
        return settings.torch_version, "torch_version in the config"
    recorded = {record: environment.torch for record, environment in recorded_environments(log_dirs).items()}
    behaviours: dict[bool, tuple[Path, str]] = {}
    for record, version in recorded.items():
        try:
            behaviours.setdefault(copies_inputs(version), (record, version))
        except ValueError:
            raise LogFormatError(f"{record}: torch {version!r} is not a PyTorch version") from None
    if len(behaviours) > 1:
        (first, old), (second, new) = behaviours[False], behaviours[True]
        raise ArgumentError(f"{', '.join(map(str, log_dirs))}: profiled with PyTorch {old} ({first.name}) and {new} "
                            f"({second.name}), whose autograd saves different tensors; fit their logs apart "
                            "(or set torch_version)")
    if not recorded:
        return None, None
    version, record = list(recorded.values())[-1], list(recorded)[-1]
    console.info(f"the device ran PyTorch {version} ({record}): the features count what it saves")
    return version, f"recorded in {record}"


def _check_positive(dataset: Dataset, target: Quantity) -> None:
    bad = dataset.rows[dataset.target <= 0]
    if len(bad):
        first = bad.iloc[0]
        raise LogFormatError(
            f"{target.kind}_logs: {len(bad)} passed runs measured {target.name} <= 0 (first: "
            f"{first['model']} at batch size {first['batch_size']}: {first['measured']:g}); the models need "
            "positive measurements: profile those runs again"
        )


def _evaluate(settings: FingerprintSettings, target: Quantity, model: CalibratedModel,
              catalog: ArchitectureCatalog) -> pd.DataFrame:
    logs = read_logs(settings.eval_nets or settings.train_nets, settings.eval_logs,
                     _log_dirs(settings, target.kind, evaluation=True), [target])
    # runs the method cannot describe (the replay's under autocast) are its fallback's, in its feature set
    answering = [model.for_recipe(recipe).feature_set for recipe in row_recipes(logs)]
    parts = [(feature_set, logs[[feature_set == answered for answered in answering]])
             for feature_set in dict.fromkeys((model.feature_set, *answering))]
    frames, missing = [], None
    for feature_set, part in parts:
        if part.empty:
            continue
        try:
            dataset = build_dataset(part, target=target.name, feature_set=feature_set, stage=settings.stage,
                                    catalog=catalog, torch_version=model.torch_version,
                                    fresh_pages_ms_per_mib=model.fresh_pages_ms_per_mib)
        except DataNotFoundError as exc:  # none usable in this part: the other may have some
            missing = exc
            continue
        rows = dataset.rows.drop(columns=ARCHITECTURE).assign(predicted=model.predict(dataset.rows))
        frames.append(rows if model.bound_ is None else rows.assign(bound=model.predict_bound(dataset.rows)))
    if not frames:
        raise missing
    return pd.concat(frames, ignore_index=True)


def _evaluated_on_training(settings: FingerprintSettings, targets: list[Quantity]) -> str | None:
    """Why the evaluation reads runs the models are fitted on (levels in both eval_logs and
    train_logs, of a network in both, from a log folder in both), or None: its errors are
    then no measure of networks the models have not seen."""
    if settings.evaluate:
        return None
    levels = sorted(set(settings.eval_logs) & set(settings.train_logs))
    nets = [net for net in dict.fromkeys(settings.eval_nets or settings.train_nets) if net in settings.train_nets]
    shared = [target.kind for target in targets
              if {d.resolve() for d in _log_dirs(settings, target.kind, evaluation=True)}
              & {d.resolve() for d in _log_dirs(settings, target.kind, evaluation=False)}]
    if not (levels and nets and shared):
        return None
    return (f"eval_logs: levels {levels} of {', '.join(nets)} are also in train_logs, read from the same "
            f"{' and '.join(shared)} log folders: the evaluation of them is on runs the models were fitted on")


def check_settings(settings: FingerprintSettings) -> str:
    """Refuse values no fit could use (before a config's earlier stages run for nothing);
    returns the method's key."""
    method = resolve_method(settings.method)
    check_stage(settings.stage, "stage")
    if settings.torch_version is not None:
        check_torch_version(settings.torch_version, "torch_version")
    enabled = [t.kind for t in QUANTITIES if getattr(settings, f"{t.kind}_model")]
    if not enabled:
        raise ArgumentError("memory_model and latency_model are both False: nothing to fit or evaluate")
    if not settings.evaluate:
        for key in ("train_nets", "train_logs"):
            if not getattr(settings, key):
                raise ArgumentError(f"{key}: empty list; the models are fitted on these")
    elif not settings.eval_logs:
        raise ArgumentError("eval_logs: empty list with evaluate = True: nothing to evaluate")
    elif not (settings.eval_nets or settings.train_nets):
        raise ArgumentError("eval_nets: empty list, and so is train_nets: no network to evaluate")
    for kind in enabled:
        if not settings.evaluate:
            _log_dirs(settings, kind, evaluation=False)
        if settings.eval_logs:
            _log_dirs(settings, kind, evaluation=True)
    return method


def fingerprint_device(settings: FingerprintSettings) -> dict[str, Any]:
    """Fit (or reuse) and evaluate this device's models; returns the evaluation report.

    The report maps each evaluated target, by its name with unit (`mem_used_mib`,
    `latency_ms`), to its MAPE in percent, row count and the same per network, its
    method, what profiling its training runs cost (`campaign`, `campaign_cost`) and `notes`
    (the warnings its evaluation gave: runs the models were fitted on, levels without a
    log, logs read twice); it is printed as a table and, when `report` is set, written there
    as JSON with the per-row predictions (CSV) and a plot (PNG) beside it.
    """
    method = check_settings(settings)
    catalog = ArchitectureCatalog(settings.pruned_models_storedir)
    enabled = [t for t in QUANTITIES if getattr(settings, f"{t.kind}_model")]
    if not settings.pruned_models_storedir.is_dir():  # made by a config's pruning: checked now, not before
        raise ArgumentError(f"pruned_models_storedir: folder not found: {settings.pruned_models_storedir}")
    for target in enabled if settings.eval_logs else ():  # a misspelt eval_nets is refused before any fit
        find_logs(settings.eval_nets or settings.train_nets, settings.eval_logs,
                  _log_dirs(settings, target.kind, evaluation=True), warn=False)
    for target in QUANTITIES:
        if target not in enabled:
            console.info(f"not creating the {target.kind} model ({target.kind}_model = False)")
    if not settings.evaluate:
        with model_folder_lock(settings.model_storedir):
            _store(settings, [model for target in enabled
                              if (model := _train(settings, target, method, catalog)) is not None])
    if not settings.eval_logs:
        console.info("no eval_logs given: nothing to evaluate")
        return {}
    report: dict[str, Any] = {}
    predictions: dict[str, pd.DataFrame] = {}
    note = _evaluated_on_training(settings, enabled)
    if note is not None:
        console.warn(note)
    for target in enabled:
        with console.collected_warnings() as warned:
            model = load_model(settings.model_storedir, stage=settings.stage, target=target.name)
            choice = model.method_choice_
            stored = DEFAULT_METHOD if choice else model.method
            if stored != method:
                console.warn(f"the stored {target.kind} model is method '{stored}', the config asks "
                             f"for '{method}'; set overwrite = True to refit")
            predictions[target.name] = _evaluate(settings, target, model, catalog)
        notes = ([note] if note is not None else []) + warned
        report[target.name] = {**summarise(predictions[target.name]),
                               "method": model.method, "method_choice": choice,
                               "torch_version": model.torch_version, "campaign": model.campaign_,
                               **({"notes": notes} if notes else {})}
    if report:
        print_report(report, predictions)
    if report and settings.report is not None:
        written = write_report(report, predictions, settings.report)
        console.info("wrote " + ", ".join(str(p) for p in written))
    return report
