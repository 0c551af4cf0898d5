"""Predict training memory and latency for any network from a device's fitted models.

`Predictor.load(DIR)` reads the models that fingerprinting stored for one device;
`predict(network, batch_sizes)` describes the network (a torchvision name, a spec, a
model file or a module: traced with an empty batch, no real weights, nothing computed) and
evaluates both models for all batch sizes at once. A prediction outside the range the
models were fitted on is flagged as extrapolated rather than silently trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perf4sight.architecture import FIRST_COPYING, Architecture, Detail
from perf4sight.console import warn
from perf4sight.device.definitions import LATENCY, MEMORY, BatchSizes, check_batch_sizes, check_stage
from perf4sight.device.recipe import DEFAULT_RECIPE, Recipe
from perf4sight.errors import DataNotFoundError, UsageError
from perf4sight.features import FEATURE_SETS, queries, recipe_extrapolation
from perf4sight.features.network import EXACT_COLUMNS, group_column
from perf4sight.fit import CalibratedModel, load_models
from perf4sight.fit.methods import method_problem
from perf4sight.predict.units import check_dataset_size

__all__ = ["Predictor", "MEMORY_BOUND", "MAX_SEARCH_BATCH", "BudgetError"]

# The memory prediction times the ratio that bounded the measurements of networks left out
# of the fit (`perf4sight.fit.held_out_ratio`): what to plan with when a crash is costly.
MEMORY_BOUND = "mem_bound_mib"
# Candidate batch sizes searched for the largest one that fits a budget.
MAX_SEARCH_BATCH = 4096
# The search's first chunk of batch sizes; each next one is four times as far.
_FIRST_CHUNK = 64


class BudgetError(UsageError):
    """No batch size fits the memory budget."""


@dataclass(frozen=True)
class Predictor:
    """The fitted models of one device and stage, keyed by the name of what they predict
    (`mem_used_mib`, `latency_ms`: their output columns)."""

    models: dict[str, CalibratedModel]
    stage: str = "training"

    @classmethod
    def load(cls, directory: str | Path, *, stage: str = "training") -> Predictor:
        """Load whichever of the memory and latency models `directory` holds (at least one);
        a model with one of its two files missing or unreadable is an error, never skipped,
        and so are models of two fingerprints (`perf4sight.fit.load_models`)."""
        check_stage(stage, "stage", UsageError)
        models = load_models(directory, stage=stage)
        if not models:
            raise DataNotFoundError(f"no fitted {stage} models in {directory}; run `perf4sight fingerprint` first")
        return cls(models=models, stage=stage)

    def describe(self, network: Any, *, recipe: Recipe = DEFAULT_RECIPE, **load_options: Any) -> Architecture:
        """The architecture of `network` (anything the network loader accepts) trained under
        `recipe`, or `network` itself when it is an Architecture (under its own recipe)."""
        if isinstance(network, Architecture):
            return network
        from perf4sight.networks import load_architecture

        # what the models' feature sets need, and never less than every layer traced
        needs = max(Detail.LAYERS, *(FEATURE_SETS[m.for_recipe(recipe).feature_set].needs
                                     for m in self.models.values()))
        return load_architecture(network, needs=needs, stage=self.stage, recipe=recipe.for_stage(self.stage),
                                 **load_options)

    def predict(
        self,
        network: Any,
        batch_sizes: Sequence[int],
        *,
        recipe: Recipe = DEFAULT_RECIPE,
        dataset_size: int | None = None,
        breakdown: bool = False,
        **load_options: Any,
    ) -> pd.DataFrame:
        """One row per batch size: the predicted memory (`mem_used_mib`) and latency per
        iteration (`latency_ms`) of the models loaded for training under `recipe` (the
        `recipe` column names it), and with `dataset_size` the time per epoch (s); with
        `breakdown`, what the memory is made of (`CalibratedModel.breakdown`'s `<part>_mib`); `mem_bound_mib` (when fingerprinting could leave a network out) the memory
        that held-out networks' runs stayed under (95 % of them; for a calibrated prediction,
        held-out levels of its family), never below the prediction; `fits_device` (when the
        memory model learned the device's capacity) whether training fits on the profiled
        device; `calibrated` whether the network's family (other pruning levels of it) was
        profiled and corrected the predictions (`perf4sight.fit.CalibratedModel`);
        `extrapolated` marks rows outside the fitted range (a batch size outside the profiled
        range, a bigger network than any profiled, or, for a network of a family not profiled, a
        layer group that fewer than two of the training networks held, which
        `extrapolated_layers` names: its cost was fitted on one network or tied to another's;
        or a recipe that changes what no profiled recipe showed, which `extrapolated_recipe`
        names with the recipe to profile to calibrate it: `recipe_extrapolation`)."""
        sizes = check_batch_sizes(batch_sizes, "batch sizes", UsageError)
        check_dataset_size(dataset_size)
        arch = self.describe(network, recipe=recipe, **load_options)
        batch = np.asarray(sizes)
        columns: dict[str, np.ndarray] = {"batch_size": batch,
                                          "recipe": np.full(len(sizes), arch.recipe.label(), dtype=object)}
        extrapolated = np.zeros(len(sizes), dtype=bool)
        calibrated = False
        unseen: set[str] = set()  # layer groups the models saw in too few networks
        query = queries(arch, sizes)
        _warn_unknown_version(self.models.get(MEMORY.name), arch)
        for column, model in self.models.items():
            answer = model.answer(query)
            if answer.method != model.method:
                warn(f"{arch.recipe.label()}: {column} predicted by the '{answer.method}' model stored as the "
                     f"fallback of the '{model.method}' one: {method_problem(model.method, [arch.recipe])}")
            columns[column] = answer.predicted
            calibrated |= bool(answer.calibrated.all())
            if column == MEMORY.name and answer.bound is not None:
                columns[MEMORY_BOUND] = answer.bound
            extrapolated |= _outside_range(model, arch, batch, answer.features)
            unseen.update(_rare_groups(model, answer.features))
            if (column == MEMORY.name and answer.fits is not None
                    and np.isfinite(model.answering(query).capacity_mib())):
                # the device's own out-of-memory boundary, learned from its failed runs (by the model that answered)
                columns["fits_device"] = answer.fits
            if column == MEMORY.name and breakdown:
                parts = model.breakdown(query)
                columns.update({name: parts[name].to_numpy() for name in parts.columns})
        if breakdown and MEMORY.name not in self.models:
            raise DataNotFoundError("--breakdown needs a memory model; fingerprint memory first")
        profiled = {recipe for model in self.models.values() for recipe in model.recipes_}
        unknown = [str(item) for item in recipe_extrapolation(arch.recipe, profiled)]
        if LATENCY.name in columns:
            if dataset_size is not None:
                columns["epoch_s"] = np.ceil(dataset_size / batch) * columns[LATENCY.name] / 1e3
            columns["images_per_s"] = batch / columns[LATENCY.name] * 1e3
        columns["calibrated"] = np.full(len(sizes), calibrated)
        if calibrated:  # its family's own runs were fitted on, whatever its layers
            unseen.clear()
        columns["extrapolated"] = extrapolated | bool(unseen) | bool(unknown)
        columns["extrapolated_layers"] = np.full(len(sizes), ", ".join(sorted(unseen)))
        columns["extrapolated_recipe"] = np.full(len(sizes), "; ".join(unknown))
        return pd.DataFrame(columns)

    def max_batch_size(
        self,
        network: Any,
        budget_mib: float,
        *,
        max_latency_ms: float | None = None,
        batch_sizes: Sequence[int] | None = None,
        recipe: Recipe = DEFAULT_RECIPE,
        dataset_size: int | None = None,
        breakdown: bool = False,
        bound: bool = False,
        **load_options: Any,
    ) -> pd.Series:
        """The row of the largest batch size predicted to fit in `budget_mib` and on the
        profiled device (and, when given, to take at most `max_latency_ms` per iteration);
        with `bound`, the memory bound (`mem_bound_mib`) must fit the budget, not the prediction.

        Batch sizes are tried in increasing order (all of 1..4096 unless given) and the
        search stops at the first that does not fit: memory and latency rise with the
        batch size, so a larger one that fits again would be a model's artefact.
        """
        if MEMORY.name not in self.models:
            raise DataNotFoundError("the loaded models have no memory model; fingerprint memory first")
        if max_latency_ms is not None and LATENCY.name not in self.models:
            raise DataNotFoundError("the loaded models have no latency model; fingerprint latency first")
        arch = self.describe(network, recipe=recipe, **load_options)  # once for every chunk
        chunks = [sorted(set(batch_sizes))] if batch_sizes else _search_chunks()
        memory = MEMORY_BOUND if bound else MEMORY.name
        best = None  # the row of the largest batch size that fits so far
        for sizes in chunks:
            table = self.predict(arch, sizes, recipe=recipe, dataset_size=dataset_size, breakdown=breakdown)
            if memory not in table:
                raise DataNotFoundError("the memory model stores no bound (it was fitted on a single architecture, "
                                        "with none to leave out); fingerprint more networks or levels to get one")
            fits = table[memory] <= budget_mib
            if "fits_device" in table:
                fits &= table["fits_device"]
            if max_latency_ms is not None:
                fits &= table[LATENCY.name] <= max_latency_ms
            fits = fits.to_numpy()
            first_miss = int(np.argmin(fits)) if not fits.all() else len(fits)
            if first_miss:
                best = table.iloc[first_miss - 1]
            if first_miss < len(fits):
                break
        if best is None:  # the smallest batch size already misses
            first = table.iloc[0]
            latency = f" and {first[LATENCY.name]:.0f} ms" if LATENCY.name in table else ""
            raise BudgetError(
                f"no batch size fits: batch size {chunks[0][0]} is predicted to need "
                f"{first[memory]:.0f} MiB{' (bound)' if bound else ''}{latency} (budget {budget_mib:.0f} MiB"
                + (f", {max_latency_ms:g} ms)" if max_latency_ms is not None else ")")
            )
        return best


def _search_chunks() -> list[BatchSizes]:
    """1..MAX_SEARCH_BATCH in chunks growing fourfold (1-64, 65-256, 257-1024, 1025-4096),
    predicted in turn until one holds a size that does not fit: a typical answer (tens to
    hundreds) costs two small predictions rather than one of 4096 sizes (a plan's 20 levels:
    0.43 -> 0.19 s, with a replay 0.78 -> 0.32). Batch sizes by construction: records no
    check need walk."""
    chunks, low, high = [], 1, _FIRST_CHUNK
    while low <= MAX_SEARCH_BATCH:
        high = min(high, MAX_SEARCH_BATCH)
        chunks.append(BatchSizes(range(low, high + 1)))
        low, high = high + 1, high * 4
    return chunks


def _warn_unknown_version(model: CalibratedModel | None, arch: Architecture) -> None:
    """Say where a memory prediction counts copies that the device's PyTorch, which nothing
    named when the model was fitted, may not make (`perf4sight.architecture.autograd`)."""
    if model is None or model.torch_version_reason is not None:
        return
    if any(layer.saved_copy_bytes for layer in arch.layers):
        warn(f"{arch.name}: its in-place ReLU6 layers save a copy of their input on PyTorch {FIRST_COPYING} and later, "
             "counted so, but the device's version is not known (no environment record beside its logs, no torch_version, "
             "and no training network with such layers to tell); fingerprint with torch_version to count what it saves")


def _outside_range(model: CalibratedModel, arch: Architecture, batch: np.ndarray, features: pd.DataFrame) -> np.ndarray:
    """True where the batch size lies outside what the model was fitted on, or the parameter
    count or any feature exceeds it (but the exact amounts of the parameters' state,
    `EXACT_COLUMNS`): a bigger network, or a kind of layer it never saw.
    `features` holds the model's feature columns (`CalibratedModel.features`)."""
    ranges = model.training_ranges_
    outside = np.zeros(len(batch), dtype=bool)
    if "batch_size" in ranges:
        low, high = ranges["batch_size"]
        outside |= (batch < low) | (batch > high)
    if "params" in ranges and arch.params > ranges["params"][1]:
        outside |= True
    highest = np.array([np.inf if name in EXACT_COLUMNS else ranges.get(name, (0.0, np.inf))[1]
                        for name in features.columns.tolist()], dtype=float)
    outside |= (features.to_numpy(dtype=float) > highest * (1 + 1e-9)).any(axis=1)
    return outside


# A layer group held by fewer training networks than this (or than all of them, if fewer)
# is rare: its cost rests on one network's data, or on none (tied to another group's).
_NETWORKS_PER_GROUP = 2


def _rare_groups(model: CalibratedModel, features: pd.DataFrame) -> set[str]:
    """The layer groups of the query (`<group>_count` > 0) that the model's training
    networks held too rarely to fit their cost (`layer_groups_`)."""
    held = model.layer_groups_
    enough = min(_NETWORKS_PER_GROUP, len(model.train_nets_))
    counts = {group: group_column(group, "count") for group, nets in held.items() if nets < enough}
    first = dict(zip(features.columns.tolist(), features.to_numpy()[0].tolist())) if counts and len(features) else {}
    return {group for group, column in counts.items() if first.get(column, 0) > 0}
