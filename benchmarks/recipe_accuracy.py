"""Accuracy under training recipes: fitted on a few networks, evaluated on the others under every profiled recipe.

The logs are those of `benchmarks/profile_recipe_subset.sh` (examples/cpu_recipes_subset/: the
eight networks of cpu_heldout.ini, training, under the default recipe, adam, adamw, amp-bf16,
the classifier only, each network from its last stage, 4 checkpointed segments, and adam +
amp-bf16 + classifier + 4 segments). Every row is predicted as the tool predicts it: its
architecture loaded under the row's recipe (`build_dataset`), a `CalibratedModel` of the
method, calibrated where the row's family was fitted on (never, for a network not trained on).
Fitted on the training networks (`--train-nets`, the demo's three by default), evaluated on
all the others, under every recipe, in two cases:
  (a) `default recipe only`: the training networks' runs under the default recipe;
  (b) `every recipe`: the same, with their runs under each profiled recipe added.
Per case and method (`--method`, repeatable; `default` chooses per target as fingerprinting
does): memory (`mem_used_mib`) and latency (`latency_ms`) MAPE % and mean signed error % per
recipe and over all runs (the latency runs' mean `cpu_elsewhere`, the share of the CPU other
processes took, beside them), the same per evaluated network, and
  (c) per recipe, the largest profiled batch size that fits a memory budget, from the
      prediction and from the memory bound, against the measured one: budgets on a fixed
      geometric grid (steps of 2^(1/8)), each network/level/recipe counted at the budgets
      between 2/3 of its smallest and 1.5x its largest measurement; the share of answers that
      are right, that name a larger batch size than fits (the run would crash) and a smaller
      one. With two batch sizes profiled this is coarse: an answer is 0 (none fits), the
      smaller or the larger.

    sh benchmarks/profile_recipe_subset.sh
    .venv/bin/python benchmarks/recipe_accuracy.py [--method physical --method default]

Reads `<logs>/memory/<net>_<level>-gt.csv`, `<logs>/latency/...` and `<models>/<net>_<level>.json`
(default out/recipes_subset/logs and out/recipes_subset/models); says so and exits when absent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.device.definitions import LATENCY, MEMORY, QUANTITIES
from perf4sight.device.recipe import DEFAULT_RECIPE, RECIPE_COLUMNS, TRAIN_ALL, TRAIN_CLASSIFIER, Recipe
from perf4sight.features import ARCHITECTURE
from perf4sight.fit import (
    BOUND_QUANTILE,
    DEFAULT_METHOD,
    METHODS,
    ArchitectureCatalog,
    architecture_name,
    mape_pct,
    read_logs,
)
from tx2_accuracy import fit_chosen, method_datasets, profiled

ROOT = Path(__file__).resolve().parents[1]
STAGE = "training"
DEMO_NETS = ("resnet18", "mobilenetv2", "squeezenet")
CASES = ("default recipe only", "every recipe")
# (c): budgets 16 MiB to 16 GiB in steps of 2^(1/8); a configuration counts the budgets from
# 2/3 of its smallest measurement to 1.5x its largest, where its answer changes.
BUDGETS_MIB = 2.0 ** (np.arange(4 * 8, 14 * 8 + 1) / 8)
BUDGET_WINDOW = (2 / 3, 1.5)


def recipe_group(recipe: Recipe) -> str:
    """What a recipe changes from the default, in a few words; each network's own last-stage
    layer reads `last stage`, so that the networks' runs of it group together."""
    parts = [value for value, default in zip(recipe[:2], DEFAULT_RECIPE[:2]) if value != default]
    if recipe.trainable != TRAIN_ALL:
        parts.append(recipe.trainable if recipe.trainable == TRAIN_CLASSIFIER else "last stage")
    if recipe.checkpoint_segments:
        parts.append(f"{recipe.checkpoint_segments} segments")
    return " + ".join(parts) or "default"


def _groups(recipes: pd.Series) -> list[str]:
    """The recipe groups present, the default first, then by how much they change, then by name."""
    names = {recipe_group(recipe) for recipe in recipes}
    return sorted(names, key=lambda name: (name != "default", name.count("+"), name))


def _evaluate(method: str, logs_dir: Path, nets: tuple[str, ...], levels: tuple[int, ...], train_nets: tuple[str, ...],
              catalog: ArchitectureCatalog) -> dict[str, pd.DataFrame]:
    """Per case, the evaluated runs (net, model, recipe, group, batch_size, measured and
    predicted per target, the memory bound, cpu_elsewhere) and the method fitted per target."""
    out: dict[str, list[pd.DataFrame]] = {case: [] for case in CASES}
    for target in QUANTITIES:
        logs = read_logs(nets, levels, [logs_dir / target.kind], [target])
        full = method_datasets(method, logs, target.name, catalog, STAGE)
        rows = next(iter(full.values())).rows
        recipes = rows[ARCHITECTURE].map(lambda arch: arch.recipe)
        trained_net = rows["net"].isin(train_nets).to_numpy()
        masks = {CASES[0]: trained_net & recipes.map(lambda recipe: recipe.is_default).to_numpy(),
                 CASES[1]: trained_net}
        evaluated = ~trained_net
        elsewhere = _cpu_elsewhere(logs, rows)
        bound_quantile = BOUND_QUANTILE if target is MEMORY else None
        for case, mask in masks.items():
            chosen, model = fit_chosen(method, {m: d.select(mask) for m, d in full.items()}, target.name,
                                       bound_quantile=bound_quantile)
            test = full[chosen].select(evaluated)
            predicted = model.predict(test.rows)
            bound = None if model.bound_ is None else model.predict_bound(test.rows)
            frame = pd.DataFrame({
                "net": test.rows["net"], "model": test.rows["model"], "batch_size": test.rows["batch_size"],
                "recipe": recipes[evaluated].to_numpy(), "target": target.name, "method": chosen,
                "measured": test.target, "predicted": predicted,
                "bound": np.nan if bound is None else bound, "cpu_elsewhere": elsewhere[evaluated],
            })
            out[case].append(frame.assign(group=frame["recipe"].map(recipe_group)))
    return {case: pd.concat(frames, ignore_index=True) for case, frames in out.items()}


def _cpu_elsewhere(logs: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Each dataset row's `cpu_elsewhere` from its log row (NaN where the log has none)."""
    if "cpu_elsewhere" not in logs.columns:
        return np.full(len(rows), np.nan)
    keys = ["model", "batch_size", *RECIPE_COLUMNS]
    passed = logs[logs["passed"]]
    shares = passed.assign(model=passed["model"].map(architecture_name), batch_size=passed["bs"])
    shares = shares[[*keys, "cpu_elsewhere"]].drop_duplicates(keys)
    return rows[keys].merge(shares, on=keys, how="left")["cpu_elsewhere"].astype(float).to_numpy()


def _error_pct(frame: pd.DataFrame) -> tuple[float, float]:
    """MAPE % and mean signed error % (positive: over-predicted) of measured/predicted rows."""
    signed = 100 * (frame["predicted"] / frame["measured"] - 1)
    return mape_pct(frame["measured"], frame["predicted"]), float(signed.mean())


def accuracy_table(runs: pd.DataFrame, groups: list[str]) -> list[tuple]:
    """Per recipe group and over all: runs, memory MAPE and bias, latency MAPE and bias, the
    latency runs' mean cpu_elsewhere."""
    table = []
    for name, selected in [(g, runs[runs["group"] == g]) for g in groups] + [("all", runs)]:
        memory, latency = (selected[selected["target"] == q.name] for q in (MEMORY, LATENCY))
        table.append((name, len(memory), *_error_pct(memory), *_error_pct(latency),
                      float(latency["cpu_elsewhere"].mean())))
    return table


def network_table(runs: pd.DataFrame, groups: list[str], nets: list[str]) -> list[tuple]:
    """Per recipe group: memory / latency MAPE % of each evaluated network."""
    table = []
    for name in groups:
        cells = []
        for net in nets:
            selected = runs[(runs["group"] == name) & (runs["net"] == net)]
            memory, latency = (selected[selected["target"] == q.name] for q in (MEMORY, LATENCY))
            cells.append(f"{_error_pct(memory)[0]:.1f} / {_error_pct(latency)[0]:.1f}")
        table.append((name, *cells))
    return table


def largest_fitting(memory: pd.DataFrame, budgets: np.ndarray) -> np.ndarray:
    """For each configuration (row of `memory`: batch size columns, memory in MiB) and budget,
    the largest batch size whose memory is within the budget (0: none)."""
    sizes = memory.columns.to_numpy()
    fits = memory.to_numpy()[:, :, None] <= budgets[None, None, :]  # configuration x batch size x budget
    return np.where(fits, sizes[None, :, None], 0).max(axis=1)


def budget_table(runs: pd.DataFrame, groups: list[str]) -> list[tuple]:
    """(c) per recipe group and over all: the (configuration, budget) pairs counted, and for
    the prediction and the bound the % of right answers, of answers too large (a crash) and
    too small."""
    memory = runs[runs["target"] == MEMORY.name].assign(recipe=lambda f: f["recipe"].map(tuple))
    keys = ["model", "recipe", "group"]
    answers = {}
    measured = memory.pivot_table(index=keys, columns="batch_size", values="measured").dropna()
    low = measured.min(axis=1).to_numpy()[:, None] * BUDGET_WINDOW[0]
    high = measured.max(axis=1).to_numpy()[:, None] * BUDGET_WINDOW[1]
    counted = (BUDGETS_MIB[None, :] >= low) & (BUDGETS_MIB[None, :] <= high)
    truth = largest_fitting(measured, BUDGETS_MIB)
    for source in ("predicted", "bound"):
        table = memory.pivot_table(index=keys, columns="batch_size", values=source, dropna=False)
        answers[source] = largest_fitting(table.reindex(index=measured.index, columns=measured.columns), BUDGETS_MIB)
    group_of = measured.index.get_level_values("group").to_numpy()
    table = []
    for name in [*groups, "all"]:
        pick = counted & ((group_of == name)[:, None] if name != "all" else True)
        cells = []
        for source in ("predicted", "bound"):
            answer, right = answers[source][pick], truth[pick]
            cells += [100 * float(np.mean(answer == right)), 100 * float(np.mean(answer > right)),
                      100 * float(np.mean(answer < right))]
        table.append((name, int(pick.sum()), *cells))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, default=ROOT / "out" / "recipes_subset" / "logs",
                        help="folder with memory/ and latency/ logs (default: out/recipes_subset/logs)")
    parser.add_argument("--models", type=Path, default=ROOT / "out" / "recipes_subset" / "models",
                        help="folder of the specs (default: out/recipes_subset/models)")
    parser.add_argument("--train-nets", type=lambda text: tuple(text.split(",")), default=DEMO_NETS,
                        help="networks fitted on, comma-separated (default: resnet18,mobilenetv2,squeezenet)")
    parser.add_argument("--method", action="append", choices=sorted([*METHODS, DEFAULT_METHOD]),
                        help="method to evaluate (repeatable; default: physical)")
    args = parser.parse_args(argv)
    console.set_quiet(True)  # the bound's refits: many progress lines
    if not (args.logs / MEMORY.kind).is_dir() or not (args.logs / LATENCY.kind).is_dir() or not args.models.is_dir():
        print(f"no logs at {args.logs} or specs at {args.models}; nothing to benchmark "
              "(profile them with benchmarks/profile_recipe_subset.sh)")
        return 0
    nets, levels = profiled(args.logs)
    evaluated_nets = [net for net in nets if net not in args.train_nets]
    if not evaluated_nets or not set(args.train_nets) <= set(nets):
        raise SystemExit(f"{args.logs}: --train-nets must name some but not all of the networks {list(nets)}")
    catalog = ArchitectureCatalog(args.models)
    for method in args.method or ["physical"]:
        start = time.perf_counter()
        results = _evaluate(method, args.logs, nets, levels, args.train_nets, catalog)
        seconds = time.perf_counter() - start
        for case, runs in results.items():
            groups = _groups(runs["recipe"])
            chosen = "; ".join(f"{target}: {', '.join(sorted(set(group['method'])))}"
                               for target, group in runs.groupby("target"))
            title = (f"method = {method} ({chosen}), fitted on {', '.join(args.train_nets)} under "
                     f"{'the default recipe' if case == CASES[0] else 'every recipe'}")
            console.print_table(f"{title}: {', '.join(evaluated_nets)} under each recipe, error % ({seconds:.0f} s)",
                                ("recipe", "runs", "memory MAPE", "memory bias", "latency MAPE", "latency bias",
                                 "cpu_elsewhere"), accuracy_table(runs, groups))
            console.print_table(f"{title}: MAPE % per network, memory / latency",
                                ("recipe", *evaluated_nets), network_table(runs, groups, evaluated_nets))
            console.print_table(f"{title}: largest batch size within a memory budget, % of (configuration, budget) "
                                f"pairs, batch sizes {sorted(set(runs['batch_size']))} only",
                                ("recipe", "pairs", "predicted: right", "too large (crash)", "too small",
                                 "bound: right", "too large (crash)", "too small"), budget_table(runs, groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
