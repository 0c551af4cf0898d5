"""Plan: which pruned variants of a network can be retrained on this device, and how fast.

The paper's stated use of perf4sight: prune a network at many levels, predict each
variant at the largest batch size that fits the memory budget (and a latency limit per
iteration), and rank the feasible ones by predicted throughput; given several training
recipes, each variant under each of them (which recipe and batch size fit the budget with
the best throughput).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd

from perf4sight import console
from perf4sight.device.recipe import DEFAULT_RECIPE, Recipe
from perf4sight.errors import UsageError
from perf4sight.predict.predictor import BudgetError, Predictor

__all__ = ["plan_variants"]


def plan_variants(
    *,
    predictor: Predictor,
    network: Any,
    levels: Sequence[float],
    budget_mib: float,
    max_latency_ms: float | None = None,
    bound: bool = False,
    mode: str = "random",
    seed: int = 0,
    input_size: Sequence[int] | None = None,
    num_classes: int | None = None,
    recipes: Sequence[Recipe] = (DEFAULT_RECIPE,),
) -> pd.DataFrame:
    """Feasible pruned variants under each of `recipes`, best predicted throughput (images
    per second) first; with `bound`, a variant's batch size is chosen by its memory bound
    (`Predictor.max_batch_size`)."""
    from perf4sight.networks import NetworkVariants

    if not levels:
        raise UsageError("no pruning level given to plan")
    variants = NetworkVariants(network, input_size=input_size, num_classes=num_classes, mode=mode, seed=seed)
    shape = {"input_size": variants.input_size, "num_classes": variants.num_classes}
    # each recipe's architecture of the network, which a variant's follows from where its widths do
    bases = {recipe: predictor.describe(variants.source, recipe=recipe, **shape) for recipe in recipes}
    rows = []
    infeasible: list[tuple[float, BudgetError]] = []
    with console.progress("planning", total=len(levels) * len(recipes)) as bar:
        for level in levels:
            name = f"{variants.name}_{level:g}"
            widths = variants.widths(level)
            pruned = None  # the level's module, pruned only where its widths cannot give its architecture
            for recipe in recipes:
                arch = None if widths is None else widths.architecture(bases[recipe], name)
                if arch is None:
                    if pruned is None:
                        pruned = variants.prune(level)
                    arch = dataclasses.replace(predictor.describe(pruned.module, recipe=recipe, **shape), name=name)
                bar.advance(f"level {level:g}, {recipe.label()}")
                try:
                    best = predictor.max_batch_size(arch, budget_mib, max_latency_ms=max_latency_ms, bound=bound)
                except BudgetError as exc:
                    infeasible.append((level, exc))
                    continue
                made = widths if pruned is None else pruned  # the level reached and parameters, either way the same
                rows.append({"level": level, "level_reached": round(made.level, 2), "params": made.params, **best})
    limits = "the budget" + (" and the latency limit" if max_latency_ms is not None else "")
    if not rows:
        level, reason = max(infeasible, key=lambda item: item[0])  # the smallest variant
        raise BudgetError(f"no pruned variant of {variants.name} at levels {list(levels)} fits {limits}; "
                          f"at level {level:g}, {reason}")
    if infeasible:
        console.info(f"{len(infeasible)} variant(s) do not fit {limits}: levels "
                     f"{', '.join(dict.fromkeys(f'{level:g}' for level, _ in infeasible))}")
    table = pd.DataFrame(rows)
    table["batch_size"] = table["batch_size"].astype(int)
    return table.sort_values("images_per_s", ascending=False, ignore_index=True)
