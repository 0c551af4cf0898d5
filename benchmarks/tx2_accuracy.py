"""Accuracy of the fingerprinting methods on a device's training measurements (default: Jetson TX2).

Two cases, each for memory (`mem_used_mib`) and latency (`latency_ms`), MAPE in percent over passed rows of one
stage (`--stage`, default training), predicted as the tool predicts (calibrated on a network's
family when it was trained on; `--raw`: the models alone):
  (a) the paper's protocol: per network, train on levels 0, 30, 50, 70, 90, evaluate on the rest;
  (b) unseen network: leave one network out, over every network of the device: train on the
      others (all levels), evaluate on this one; with `--train-nets`, train on those networks
      only and evaluate on each of the others.
Every method (`--method`, repeatable) and then `default`, which chooses per split and target
as fingerprinting does (on the split's training rows alone); a last table gives every method's
means side by side. The device's PyTorch, which decides what autograd saves, is `--torch-version`
or the one recorded beside the logs; where neither says (the TX2's logs), the memory model of
each split counts the saved tensors as the one of the two ways fingerprinting chooses
(`perf4sight.fit.choose_torch_version`; shown beside the method).

    .venv/bin/python benchmarks/tx2_accuracy.py [--method paper --method ...]
    .venv/bin/python benchmarks/tx2_accuracy.py --torch-version 1.8 --squeezenet-as-profiled   # the TX2 as it ran
    .venv/bin/python benchmarks/tx2_accuracy.py --logs out/demo/logs --models out/demo/models \
        --train-levels 0,30,60,90
    .venv/bin/python benchmarks/tx2_accuracy.py --logs out/heldout/logs --models out/heldout/models \
        --train-levels 0,30,90 --train-nets resnet18,mobilenetv2,squeezenet [--stage inference]

Reads `<logs>/memory/<net>_<level>-gt.csv`, `<logs>/latency/...` and `<models>/<net>_<level>.json`;
the networks and levels are those of the memory logs. The default is ../shared/datasets/tx2
(relative to the repository root); exits with a message when it is absent.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.architecture import BEFORE_COPIES
from perf4sight.device.definitions import LATENCY, MEMORY, QUANTITIES
from perf4sight.device.logs import GT_SUFFIX
from perf4sight.features import FEATURE_SETS
from perf4sight.fit import (
    BOUND_QUANTILE,
    DEFAULT_METHOD,
    METHODS,
    ArchitectureCatalog,
    CalibratedModel,
    Dataset,
    architecture_name,
    build_dataset,
    candidate_methods,
    choose_method,
    choose_torch_version,
    mape_pct,
    read_logs,
)
from perf4sight.fit.logs import recorded_environments
from perf4sight.fit.dataset import logged_recipes
from perf4sight.fit.choice import holds_copies
from perf4sight.fit.methods import method_problem

TX2_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "tx2"
# SqueezeNet as the TX2's runs trained it (the dataset's specs name torchvision's; see the file)
SQUEEZENET_AS_PROFILED = Path(__file__).resolve().parent / "data" / "tx2" / "squeezenet_as_profiled.py"
PROTOCOL_TRAIN_LEVELS = (0, 30, 50, 70, 90)
# Batch-size bands of the latency's signed error: where along the batch size a network's error lies.
BS_BANDS = ((1, 8), (9, 32), (33, 96), (97, np.inf))
# The TX2 README's order: the trees' random draws, hence the `paper` figures, follow the row order.
TX2_NETS = ("resnet18", "googlenet", "squeezenet", "mobilenetv2")
_LOG_NAME = re.compile(r"(?P<net>.+)_(?P<level>\d+)" + re.escape(GT_SUFFIX))


@dataclass(frozen=True)
class Data:
    """Where a device's measurements lie, and which networks and levels they hold."""

    logs: Path
    models: Path
    nets: tuple[str, ...]
    levels: tuple[int, ...]
    train_levels: tuple[int, ...]
    train_nets: tuple[str, ...] = ()  # empty: each network is unseen in turn, trained on the others
    torch_version: str | None = None  # the device's PyTorch (`perf4sight.architecture.autograd`)

    def unseen(self) -> list[tuple[str, tuple[str, ...]]]:
        """(evaluated net, the networks trained on) of the unseen-network case."""
        if self.train_nets:
            return [(net, self.train_nets) for net in self.nets if net not in self.train_nets]
        return [(net, tuple(other for other in self.nets if other != net)) for net in self.nets]

    def cases(self) -> list[tuple[str, str, dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]]:
        """(case, evaluated net, train {net: levels}, eval {net: levels})."""
        held_out = tuple(level for level in self.levels if level not in self.train_levels)
        cases = [("protocol", net, {net: self.train_levels}, {net: held_out}) for net in self.nets]
        cases += [("unseen", net, dict.fromkeys(train, self.levels), {net: self.levels}) for net, train in self.unseen()]
        return cases


def profiled(logs: Path) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The networks (sorted) and levels of the memory logs under `logs`."""
    found = [_LOG_NAME.fullmatch(path.name) for path in sorted((logs / MEMORY.kind).glob(f"*{GT_SUFFIX}"))]
    found = [match for match in found if match]
    return tuple(sorted({m["net"] for m in found})), tuple(sorted({int(m["level"]) for m in found}))


def find_data(
    logs: Path, models: Path, train_levels: tuple[int, ...], order: tuple[str, ...] = (), train_nets: tuple[str, ...] = (),
    torch_version: str | None = None,
) -> Data:
    """The networks and levels of `logs/memory`, networks named in `order` first in that order;
    the protocol trains on the `train_levels` present, the unseen case on `train_nets` if given.
    The device's PyTorch: `torch_version`, else the one its profiler recorded beside the logs."""
    names, levels = profiled(logs)
    present = set(names)
    nets = tuple(net for net in order if net in present) + tuple(sorted(present - set(order)))
    train = tuple(level for level in train_levels if level in levels)
    if len(nets) < 2 or not train or len(train) == len(levels):
        raise SystemExit(f"{logs}: need logs of at least 2 networks and levels both in and out of the protocol's "
                         f"training levels {list(train_levels)}; found networks {list(nets)}, levels {list(levels)}")
    missing = sorted(set(train_nets) - present)
    if missing or (train_nets and set(train_nets) == present):
        raise SystemExit(f"{logs}: --train-nets must name some but not all of the networks {list(nets)}; "
                         f"not found: {missing}")
    recorded = [environment.torch for environment in recorded_environments([logs / MEMORY.kind]).values()]
    version = torch_version or (recorded[-1] if recorded else None)
    return Data(logs=logs, models=models, nets=nets, levels=levels, train_levels=train, train_nets=train_nets,
                torch_version=version)


def as_profiled(models: Path, folder: Path) -> Path:
    """`folder` holding `models`' files, the squeezenet specs built from `SQUEEZENET_AS_PROFILED`
    (copied beside them, where a spec may run its model file) instead of torchvision's builder
    (their channels as they are)."""
    shutil.copy(SQUEEZENET_AS_PROFILED, folder)
    for path in models.iterdir():
        if path.name.startswith("squeezenet_") and path.suffix == ".json":
            spec = json.loads(path.read_text())
            spec.update(torchvision=None, torchvision_kwargs=None, model_desc=f"{SQUEEZENET_AS_PROFILED.name}:squeezenet")
            (folder / path.name).write_text(json.dumps(spec))
        else:
            shutil.copy(path, folder)  # a copy, not a link: a spec runs a model file of its own folder only
    return folder


def model_levels(models: pd.Series) -> pd.Series:
    """The pruning level of each architecture name `<net>_<level>`."""
    return models.str.rsplit("_", n=1).str[1].astype(int)


def _mask(rows: pd.DataFrame, selection: dict[str, tuple[int, ...]]) -> np.ndarray:
    levels = model_levels(rows["model"])
    return np.logical_or.reduce([(rows["net"] == net) & levels.isin(lv) for net, lv in selection.items()])


def candidates(method: str, target: str) -> tuple[str, ...]:
    """The methods `method` fits: itself, or for `default` the ones it chooses among."""
    return candidate_methods(target) if method == DEFAULT_METHOD else (method,)


def method_datasets(method: str, logs: pd.DataFrame, target: str, catalog: ArchitectureCatalog, stage: str,
                    passed_only: bool = True, torch_version: str | None = None,
                    fresh_pages_ms_per_mib: float | None = None) -> dict[str, Dataset]:
    """The runs of `logs` in the feature set of each method `method` fits (for `default`, those
    that can describe every run, as fingerprinting leaves out `replay` where runs ran under
    autocast), on a device of `torch_version` and `fresh_pages_ms_per_mib` (`build_dataset`)."""
    fitted = candidates(method, target)
    if method == DEFAULT_METHOD:
        recipes = logged_recipes(logs[logs["passed"]] if passed_only else logs)
        fitted = tuple(m for m in fitted if method_problem(m, recipes) is None)
    built = {feature_set: build_dataset(logs, target=target, feature_set=feature_set, stage=stage, catalog=catalog,
                                        passed_only=passed_only, torch_version=torch_version,
                                        fresh_pages_ms_per_mib=fresh_pages_ms_per_mib)
             for feature_set in dict.fromkeys(METHODS[m].feature_set for m in fitted)}
    return {m: built[METHODS[m].feature_set] for m in fitted}


def fit_chosen(method: str, trained_on: dict[str | None, dict[str, Dataset]], target: str,
               bound_quantile: float | None = None) -> tuple[str, str | None, CalibratedModel]:
    """The method fitted (for `default`, the one chosen on the training rows, as fingerprinting
    chooses), the device's PyTorch it counts what autograd saves for and its model (with the
    memory bound at `bound_quantile` if given). `trained_on` holds the rows as each candidate
    version saves them: one where the version is known, else (memory) the host's and
    `BEFORE_COPIES`, chosen between as fingerprinting chooses where the rows hold copies."""
    versions = list(trained_on)
    if not holds_copies(next(iter(trained_on[versions[0]].values()))):
        versions = versions[:1]  # nothing a version saves differently: no choice to make
    choices = {v: choose_method(trained_on[v], target) if method == DEFAULT_METHOD else None for v in versions}
    version = versions[0]
    if len(versions) > 1:
        version, _ = choose_torch_version({v: (trained_on[v], choices[v]) for v in versions}, method, target)
    chosen = choices[version].chosen if choices[version] is not None else method
    data = trained_on[version][chosen]
    return chosen, version, CalibratedModel(chosen, target, data.stage, bound_quantile=bound_quantile,
                                            torch_version=version,
                                            fresh_pages_ms_per_mib=data.fresh_pages_ms_per_mib).fit(data.rows, data.target)


def versions_of(data: Data, target: str) -> tuple[str | None, ...]:
    """The device's PyTorch versions the rows are built for: the one known, else (memory) the
    two ways autograd saves that fingerprinting chooses between."""
    return (None, BEFORE_COPIES) if data.torch_version is None and target == MEMORY.name else (data.torch_version,)


def evaluate_method(
    method: str, data: Data, catalog: ArchitectureCatalog, stage: str = "training", calibrate: bool = True
) -> tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], dict[str, str]],
           dict[tuple[str, str, str], float]]:
    """MAPE per (case, net) and target for one method, the method fitted for each (the one
    `default` chose), and the latency's mean signed error (%) per (case, net, batch-size band
    of `BS_BANDS`); with `calibrate`, as the tool predicts: corrected on the evaluated network's
    family where it was trained on (the protocol's case; an unseen network's family never is)."""
    results: dict[tuple[str, str], dict[str, float]] = {}
    fitted: dict[tuple[str, str], dict[str, tuple[str, str | None]]] = {}
    signed: dict[tuple[str, str, str], float] = {}
    for target in QUANTITIES:
        logs = read_logs(data.nets, data.levels, [data.logs / target.kind], [target])
        full = {v: method_datasets(method, logs, target.name, catalog, stage, torch_version=v)
                for v in versions_of(data, target.name)}
        rows = next(iter(next(iter(full.values())).values())).rows
        for case, net, train, evaluation in data.cases():
            train_mask, eval_mask = _mask(rows, train), _mask(rows, evaluation)
            trained = {v: {m: d.select(train_mask) for m, d in sets.items()} for v, sets in full.items()}
            chosen, version, model = fit_chosen(method, trained, target.name)
            evaluated = full[version][chosen].select(eval_mask)
            predicted = model.predict(evaluated.rows, calibrate=calibrate)
            results.setdefault((case, net), {})[target.name] = mape_pct(evaluated.target, predicted)
            fitted.setdefault((case, net), {})[target.name] = (chosen, version)
            if target is LATENCY:
                bands = signed_error_pct(predicted, evaluated.target, evaluated.rows["batch_size"], BS_BANDS)
                signed.update({(case, net, band): error for band, error in bands.items()})
    return results, fitted, signed


def signed_error_pct(predicted: np.ndarray, measured: Any, batch_sizes: pd.Series,
                     bands: Sequence[tuple[int, float]]) -> dict[str, float]:
    """The mean signed error (%) of the rows in each batch-size band (lowest, highest) that holds
    any, by the band's name (`bs 8`, `bs 9-32`, `bs 97+`)."""
    error = 100 * (predicted / np.asarray(measured, dtype=float) - 1)
    sizes = batch_sizes.to_numpy()
    found = {}
    for low, high in bands:
        band = (sizes >= low) & (sizes <= high)
        if band.any():
            name = f"bs {low}" if low == high else f"bs {low}+" if high == np.inf else f"bs {low}-{high}"
            found[name] = float(np.mean(error[band]))
    return found


def memory_boundary(
    method: str, data: Data, catalog: ArchitectureCatalog, fitted: dict[tuple[str, str], dict[str, tuple[str, str | None]]],
    stage: str = "training", calibrate: bool = True
) -> dict[tuple[str, str], tuple[float, ...]]:
    """Per case and evaluated network: % of its tests (passed or not) whose fit/no-fit is
    predicted right, % of its passed tests whose memory is under-estimated (what crashes a
    user's run), the same for the memory bound (fingerprinting's `held_out_ratio` of the
    training runs, the calibrated ratio for a calibrated prediction), and how far above the
    measurement the bound lies on average (%, what it costs). Predictions as the tool makes
    them (calibrated on a trained family) unless `calibrate` is False; `fitted` names the
    memory method and PyTorch version of each case (`evaluate_method`'s, those chosen).

    A method whose solver learns the device's capacity decides itself (`predict_fits`); any
    other fits when its prediction is at most the largest `mem_used_mib` measured in training.
    """
    logs = read_logs(data.nets, data.levels, [data.logs / MEMORY.kind], [MEMORY])
    passed = set(zip(logs.loc[logs["passed"], "model"].map(architecture_name), logs.loc[logs["passed"], "bs"]))
    full = {v: method_datasets(method, logs, MEMORY.name, catalog, stage, passed_only=False, torch_version=v)
            for v in versions_of(data, MEMORY.name)}
    out = {}
    for case, net, train_levels, evaluation in data.cases():
        chosen, version = fitted[(case, net)][MEMORY.name]
        every = full[version][chosen]
        ok = np.array([(m, b) in passed for m, b in zip(every.rows["model"], every.rows["batch_size"])])
        train = every.select(_mask(every.rows, train_levels) & ok)
        model = CalibratedModel(chosen, MEMORY.name, train.stage, bound_quantile=BOUND_QUANTILE,
                                torch_version=train.torch_version).fit(train.rows, train.target)
        evaluated = _mask(every.rows, evaluation)
        test = every.select(evaluated)
        if hasattr(model.regressor_[-1], "predict_demand"):  # a memory solver: it learned the capacity
            fits = model.predict_fits(test.rows)
        else:
            fits = model.predict(test.rows, calibrate=False) <= train.target.max()
        test_ok = ok[evaluated]
        passed_rows = test.select(test_ok)
        predicted = model.predict(passed_rows.rows, calibrate=calibrate)
        bounded = (predicted * np.nan if model.bound_ is None  # a single architecture trained on: no bound
                   else model.predict_bound(passed_rows.rows, calibrate=calibrate))
        measured = passed_rows.target
        out[(case, net)] = tuple(100 * float(np.mean(x)) for x in (
            fits == test_ok, predicted < measured, bounded < measured, bounded / measured - 1))
    return out


def feature_ms(feature_set: str, data: Data, catalog: ArchitectureCatalog, batch_sizes: list[int],
               stage: str) -> float:
    """Median time to compute one network's features of `stage` for all `batch_sizes`, in ms
    (the allocator's replays included: none kept from the evaluation's queries)."""
    times = []
    for net in data.nets:
        for level in data.levels:
            arch = catalog.get(f"{net}_{level}", needs=FEATURE_SETS[feature_set].needs, stage=stage)
            arch = dataclasses.replace(arch, lifetimes={name: dataclasses.replace(timeline, peaks={})
                                                        for name, timeline in arch.lifetimes.items()})
            start = time.perf_counter()
            FEATURE_SETS[feature_set](arch, batch_sizes, stage)
            times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", action="append", choices=sorted([*METHODS, DEFAULT_METHOD]),
                        help="method to evaluate (repeatable; 'default' chooses per split as fingerprinting "
                             "does); default: every method, then 'default'")
    parser.add_argument("--logs", type=Path, default=TX2_DIR,
                        help="folder with memory/ and latency/ logs (default: the TX2 dataset)")
    parser.add_argument("--models", type=Path, help="folder of the specs (default: <logs>/models)")
    parser.add_argument("--train-levels", type=_levels, default=PROTOCOL_TRAIN_LEVELS,
                        help="protocol training levels, comma-separated (default: 0,30,50,70,90, those present)")
    parser.add_argument("--stage", choices=("training", "inference"), default="training",
                        help="the stage whose logs are evaluated (default: training)")
    parser.add_argument("--raw", action="store_true",
                        help="the models' own predictions, without the calibration on a trained family")
    parser.add_argument("--train-nets", type=lambda text: tuple(text.split(",")), default=(),
                        help="networks the unseen case trains on, comma-separated (default: each network "
                             "is evaluated trained on all the others)")
    parser.add_argument("--squeezenet-as-profiled", action="store_true",
                        help="build the squeezenet specs as the TX2's runs trained them (ReLU after each Fire "
                             "module's concatenation, no Dropout: benchmarks/data/tx2/squeezenet_as_profiled.py)")
    parser.add_argument("--torch-version",
                        help="the device's PyTorch, for logs without an environment record (the TX2's: 1.8)")
    args = parser.parse_args(argv)
    console.set_quiet(True)  # the memory bound's refits: thousands of progress lines
    models = args.models or args.logs / "models"
    if not models.is_dir() or not (args.logs / MEMORY.kind).is_dir():
        print(f"no logs at {args.logs / MEMORY.kind} or specs at {models}; nothing to benchmark")
        return 0
    if args.logs == TX2_DIR and not (args.torch_version and args.squeezenet_as_profiled):
        print("the TX2's runs used a PyTorch before 1.10 and the authors' SqueezeNet (BENCHMARKS.md, \"TX2: the "
              "networks as they ran\"): --torch-version 1.8 --squeezenet-as-profiled describe them so")
    if args.squeezenet_as_profiled:
        models = as_profiled(models, Path(tempfile.mkdtemp(prefix="tx2_models_")))
    data = find_data(args.logs, models, args.train_levels, TX2_NETS, args.train_nets, args.torch_version)
    device = (("TX2" if args.logs == TX2_DIR else str(args.logs)) + f", PyTorch {data.torch_version or 'not known: chosen per split for memory'}"
              + (", squeezenet as profiled" if args.squeezenet_as_profiled else ""))
    catalog = ArchitectureCatalog(data.models)
    summary = []
    for method in args.method or [*METHODS, DEFAULT_METHOD]:
        start = time.perf_counter()
        results, fitted, signed = evaluate_method(method, data, catalog, args.stage, calibrate=not args.raw)
        seconds = time.perf_counter() - start
        rows = [(case, net, r[MEMORY.name], r[LATENCY.name],
                 *(f"{m}" + (f" ({v})" if v else "") for m, v in fitted[(case, net)].values()))
                for (case, net), r in results.items()]
        for case in ("protocol", "unseen"):
            mem = [r[MEMORY.name] for (c, _), r in results.items() if c == case]
            lat = [r[LATENCY.name] for (c, _), r in results.items() if c == case]
            rows.append((case, "mean", float(np.mean(mem)), float(np.mean(lat)), "", ""))
            summary.append((method, case, float(np.mean(mem)), float(np.mean(lat))))
        console.print_table(f"{device} {args.stage} MAPE %, method = {method} ({seconds:.1f} s)",
                            ("case", "evaluated net", MEMORY.name, LATENCY.name, f"{MEMORY.name} method",
                             f"{LATENCY.name} method"), rows)
        bands = list(dict.fromkeys(band for _, _, band in signed))
        console.print_table(f"{device} unseen network, latency, mean signed error % by batch size, method = {method}",
                            ("evaluated net", *bands),
                            [(net, *(signed.get(("unseen", net, band), float("nan")) for band in bands))
                             for case, net in results if case == "unseen"])
        boundary = memory_boundary(method, data, catalog, fitted, args.stage, calibrate=not args.raw)
        rows = [(case, net, *values) for (case, net), values in boundary.items()]
        for case in ("protocol", "unseen"):
            values = [v for (c, _), v in boundary.items() if c == case]
            rows.append((case, "mean", *np.mean(values, axis=0).tolist()))
        console.print_table(f"{device} memory boundary, method = {method}",
                            ("case", "evaluated net", "fit / no fit right %", "memory under-estimated %",
                             "bound under-estimated %", "bound above measured %"), rows)
        sizes = list(range(8, 208, 8))
        methods = (m for quantity in QUANTITIES for m in candidates(method, quantity.name))
        for feature_set in dict.fromkeys(METHODS[m].feature_set for m in methods):
            ms = feature_ms(feature_set, data, catalog, sizes, args.stage)
            print(f"'{feature_set}' features of one network for {len(sizes)} batch sizes: {ms:.2f} ms (median)")
    unseen = "unseen network (" + ("trained on " + ", ".join(data.train_nets) if data.train_nets
                                   else "each left out, trained on the others") + ")"
    console.print_table(f"{device} {args.stage} MAPE %, every method: protocol and {unseen}",
                        ("method", "case", MEMORY.name, LATENCY.name), summary)
    return 0


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(level) for level in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated levels such as 0,30,60,90, got {text!r}") from None


if __name__ == "__main__":
    sys.exit(main())
