"""CLI for prediction and planning: `perf4sight predict` and `perf4sight plan`.

Each command checks every option before it imports pandas, torch or scikit-learn and loads
the models: a wrong option is answered at once. A budget of `auto` is read last, as it asks
the device."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from perf4sight import console
from perf4sight.cli.prune import parse_input_size, parse_levels
from perf4sight.device.checks import parse_decimal
from perf4sight.device.definitions import BatchSizes, check_batch_sizes, check_stage
from perf4sight.device.recipe import (DEFAULT_RECIPE, OPTIMIZERS, PRECISIONS, RECIPE_COLUMNS, ZERO_GRAD_ORDERS, Recipe,
                                     check_recipe)
from perf4sight.errors import UsageError, clip
from perf4sight.networks.checks import check_input_size, check_mode, check_num_classes, check_seed
from perf4sight.predict.units import check_dataset_size, parse_duration_ms, parse_memory_mib

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["register"]

# What `predict` answers for when no --bs is given.
_DEFAULT_BATCH_SIZES = "8,16,32,64"


def _batch_sizes(text: str) -> BatchSizes:
    sizes = [parse_decimal(part) for part in text.split(",")]
    if None in sizes:
        raise UsageError(f"--bs: expected comma-separated positive integers, got {clip(repr(text))}")
    return check_batch_sizes(sizes, "--bs", UsageError)


def _shape(input_size: str | None, num_classes: int | None) -> dict[str, Any]:
    """The network's `input_size` and `num_classes` options, checked as the loader checks them."""
    check_num_classes(num_classes)
    return {"input_size": check_input_size(parse_input_size(input_size)) if input_size else None,
            "num_classes": num_classes}


def _recipes(optimizer: str, precision: str, trainable: str, segments: str, zero_grad: str) -> list[Recipe]:
    """The training recipes of the recipe options, each a comma-separated list: every
    combination of their values, checked (a layer name is checked against the network)."""
    values = {key: [part.strip() for part in text.split(",")]
              for key, text in (("optimizer", optimizer), ("precision", precision), ("trainable", trainable),
                                ("checkpoint_segments", segments), ("zero_grad", zero_grad))}
    counts = [parse_decimal(part) for part in values["checkpoint_segments"]]
    if None in counts:
        raise UsageError("--checkpoint-segments: expected comma-separated non-negative integers, "
                         f"got {clip(repr(segments))}")
    values["checkpoint_segments"] = counts
    return [check_recipe(Recipe(*combination), "", UsageError)
            for combination in itertools.product(*(values[key] for key in RECIPE_COLUMNS))]


# The network's shape options `predict` and `plan` share (None: the network's own).
_INPUT_SIZE = typer.Option(None, "--input-size", help="C,H,W, e.g. 3,224,224.")
_NUM_CLASSES = typer.Option(None, "--num-classes")
# The recipe options `predict` and `plan` share: comma lists, every combination answered.
_OPTIMIZER = typer.Option(DEFAULT_RECIPE.optimizer, "--optimizer",
                          help=f"Optimizer: {', '.join(OPTIMIZERS)} (comma-separated: each).")
_PRECISION = typer.Option(DEFAULT_RECIPE.precision, "--precision",
                          help=f"Precision: {', '.join(PRECISIONS)} (comma-separated: each).")
_TRAINABLE = typer.Option(DEFAULT_RECIPE.trainable, "--trainable",
                          help="What is trained: all, classifier, or the first trained layer's name, e.g. layer4 "
                               "(comma-separated: each).")
_SEGMENTS = typer.Option(str(DEFAULT_RECIPE.checkpoint_segments), "--checkpoint-segments",
                         help="Activation checkpointing: 0 (none) or a number of segments (comma-separated: each).")
_ZERO_GRAD = typer.Option(DEFAULT_RECIPE.zero_grad, "--zero-grad",
                          help=f"Where the step clears the gradients: {' or '.join(ZERO_GRAD_ORDERS)} "
                               "(before the forward pass, as PyTorch's tutorials do; comma-separated: each).")


def _show(table: pd.DataFrame, *, title: str, as_json: bool) -> None:
    """The table (JSON records with `--json`): a row per batch size and recipe, with notes;
    what an extrapolated recipe rests on, once per recipe; and the memory's breakdown, where
    asked for, as a table of its own."""
    from perf4sight.device.definitions import LATENCY, MEMORY
    from perf4sight.predict import MEMORY_BOUND

    if as_json:
        console.out.print_json(json.dumps(table.to_dict(orient="records")))
        return
    names = {MEMORY.name: "memory (MiB)", MEMORY_BOUND: "memory bound (MiB)", LATENCY.name: "latency (ms)",
             "epoch_s": "epoch (s)", "images_per_s": "images/s", "batch_size": "batch size",
             "level_reached": "level reached", "fits_device": "fits device"}
    # the breakdown's parts: every other column in MiB
    parts = [c for c in table.columns if c.endswith("_mib") and c not in (MEMORY.name, MEMORY_BOUND)]
    notes = [c for c in ("calibrated", "extrapolated") if c in table.columns]
    columns = [c for c in table.columns if c not in (*notes, *parts, "extrapolated_layers", "extrapolated_recipe")]

    def note(row: pd.Series, column: str) -> str:  # the layer groups an extrapolation is for
        layers = row.get("extrapolated_layers") if column == "extrapolated" else ""
        return f"{column} ({layers})" if layers else column

    rows = [[row[c] for c in columns] + [", ".join(note(row, c) for c in notes if row[c])]
            for _, row in table.iterrows()]
    console.print_table(title, [names.get(c, c) for c in columns] + ["note"], rows)
    if "extrapolated_recipe" in table.columns:
        for recipe, why in table[["recipe", "extrapolated_recipe"]].drop_duplicates().itertuples(index=False):
            if why:
                console.warn(f"{recipe}: extrapolated: {why}")
    if parts:
        keys = [c for c in ("batch_size", "recipe", "level") if c in table.columns]
        console.print_table("what the memory is made of (MiB)", [names.get(c, c) for c in keys]
                            + [c.removesuffix("_mib").replace("_", " ") for c in parts],
                            table[keys + parts].values.tolist())


def register(app: typer.Typer) -> None:
    """Add `predict` and `plan` to the perf4sight app."""

    @app.command("predict")
    def predict(
        models: Path = typer.Option(..., "--models", help="Folder of fitted models (fingerprint's model_storedir)."),
        net: str = typer.Option(..., "--net", help="torchvision name, spec .json, or model file 'file.py:factory'."),
        bs: str | None = typer.Option(None, "--bs", help=f"Batch sizes, comma-separated (default {_DEFAULT_BATCH_SIZES})."),
        dataset_size: int | None = typer.Option(None, "--dataset-size", help="Images per epoch, for the epoch time."),
        max_batch_size: bool = typer.Option(False, "--max-batch-size", help="Find the largest batch size that fits --budget."),
        budget: str | None = typer.Option(None, "--budget", help="Memory budget, e.g. 7.5GiB, 512MB, or 'auto'."),
        bound: bool = typer.Option(False, "--bound", help="Fit the memory bound, not the prediction, in --budget."),
        stage: str = typer.Option("training", "--stage", help="training or inference."),
        input_size: str | None = _INPUT_SIZE,
        num_classes: int | None = _NUM_CLASSES,
        optimizer: str = _OPTIMIZER,
        precision: str = _PRECISION,
        trainable: str = _TRAINABLE,
        segments: str = _SEGMENTS,
        zero_grad: str = _ZERO_GRAD,
        breakdown: bool = typer.Option(False, "--breakdown", help="Add what the memory is made of (MiB): runtime, "
                                       "weights, gradients, optimizer state, saved activations, workspace/cache."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON records instead of a table."),
    ) -> None:
        """Predicted memory and latency per iteration of NET at each batch size, per training recipe."""
        if max_batch_size and budget is None:
            raise UsageError("--max-batch-size needs --budget (e.g. --budget 7.5GiB or auto)")
        if max_batch_size and bs is not None:
            raise UsageError("--bs and --max-batch-size: give one (the search tries every batch size itself)")
        if not max_batch_size and (budget is not None or bound):
            raise UsageError(f"{'--budget' if budget is not None else '--bound'} needs --max-batch-size")
        recipes = _recipes(optimizer, precision, trainable, segments, zero_grad)
        sizes = None if max_batch_size else _batch_sizes(bs if bs is not None else _DEFAULT_BATCH_SIZES)
        check_stage(stage, "stage", UsageError)
        check_dataset_size(dataset_size)
        options = {**_shape(input_size, num_classes), "dataset_size": dataset_size, "breakdown": breakdown}
        budget_mib = parse_memory_mib(budget) if budget is not None else None

        import pandas as pd

        from perf4sight.predict import MAX_SEARCH_BATCH, Predictor

        predictor = Predictor.load(models, stage=stage)
        if budget_mib is not None:
            rows = [predictor.max_batch_size(net, budget_mib, bound=bound, recipe=recipe, **options)
                    for recipe in recipes]
            _show(pd.DataFrame(rows).reset_index(drop=True), title=f"{net}: largest batch size within {budget}",
                  as_json=as_json)
            if any(row["batch_size"] >= MAX_SEARCH_BATCH for row in rows):
                console.warn(f"every batch size up to {MAX_SEARCH_BATCH}, the largest searched, is predicted to fit")
            return
        table = pd.concat([predictor.predict(net, sizes, recipe=recipe, **options) for recipe in recipes],
                          ignore_index=True)
        _show(table, title=f"{net}: predicted {stage} cost on this device", as_json=as_json)

    @app.command("plan")
    def plan(
        models: Path = typer.Option(..., "--models", help="Folder of fitted models."),
        net: str = typer.Option(..., "--net", help="Network to prune: torchvision name or model file."),
        levels: str = typer.Option("0:90:10", "--levels", help="Pruning levels: '0:90:5' or '0,30,50'."),
        budget: str = typer.Option(..., "--budget", help="Memory budget, e.g. 4GiB, or 'auto'."),
        max_latency: str | None = typer.Option(None, "--max-latency", help="Latency limit per iteration, e.g. 500ms."),
        bound: bool = typer.Option(False, "--bound", help="Fit the memory bound, not the prediction, in --budget."),
        mode: str = typer.Option("random", "--mode", help="random or l1-norm channel selection."),
        seed: int = typer.Option(0, "--seed"),
        input_size: str | None = _INPUT_SIZE,
        num_classes: int | None = _NUM_CLASSES,
        optimizer: str = _OPTIMIZER,
        precision: str = _PRECISION,
        trainable: str = _TRAINABLE,
        segments: str = _SEGMENTS,
        zero_grad: str = _ZERO_GRAD,
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Pruned variants of NET (and training recipes, given several) that fit the budget, ranked by
        predicted throughput."""
        pruning_levels = parse_levels(levels)
        check_mode(mode)
        check_seed(seed)
        recipes = _recipes(optimizer, precision, trainable, segments, zero_grad)
        shape = _shape(input_size, num_classes)
        max_latency_ms = parse_duration_ms(max_latency) if max_latency else None
        budget_mib = parse_memory_mib(budget)

        from perf4sight.predict import Predictor, plan_variants

        table = plan_variants(
            predictor=Predictor.load(models),
            network=net,
            levels=pruning_levels,
            budget_mib=budget_mib,
            max_latency_ms=max_latency_ms,
            bound=bound,
            mode=mode,
            seed=seed,
            recipes=recipes,
            **shape,
        )
        _show(table, title=f"{net}: feasible pruned variants within {budget}", as_json=as_json)
