"""What a fit made under some recipes cannot know about another.

The features follow a recipe exactly where its effect is an amount: bytes kept (gradients,
optimizer state, what autograd saves in autocast's dtype), bytes moved (the optimizer's
passes, half the bytes under autocast), operations done (recomputed forward passes, the
gradients a frozen layer skips). The fitted coefficients are the device's rates and
scales, so a device fingerprinted under one recipe predicts the others' memory. What no
amount can carry is a rate the profiled runs never exercised: the arithmetic of
half-precision kernels (tensor cores, AMX, or a CPU that emulates bf16 slower than fp32),
and an optimizer's step, priced by its passes at the rates of the optimizers profiled: a
pass of Adam's (a square root, a division, one parameter at a time) costs more than one of
SGD's, and on a CPU the C library may hand its temporaries' pages back to the system after
each parameter's step, to fault them in again at the next (BENCHMARKS.md, "An optimizer
never profiled").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from perf4sight.device.recipe import DEFAULT_RECIPE, OPTIMIZERS, PRECISIONS, Recipe
from perf4sight.features.network import AUTOCAST_TERMS, NETWORK_TERMS, STEP_TERMS, STREAM_TERMS
from perf4sight.features.terms import Role

__all__ = ["Extrapolation", "recipe_extrapolation"]

# The latency terms whose rates are arithmetic (GEMM operations), per feature set's term sets:
# autocast's 16-bit GEMMs' (`AUTOCAST_TERMS`), and those in fp32.
_ARITHMETIC_TERMS = tuple(dict.fromkeys(
    term.name for terms in (NETWORK_TERMS, STREAM_TERMS) for term in terms.latency
    if term.unit == "flops" and term.role is Role.FITTED and term.name not in AUTOCAST_TERMS))


class Extrapolation(NamedTuple):
    """One thing a prediction under `recipe` rests on that the profiled recipes did not show:
    what (`reason`), the latency terms whose fitted rates it concerns, and the one recipe
    whose profiled runs would calibrate it."""

    reason: str
    terms: tuple[str, ...]
    calibrate: Recipe

    def __str__(self) -> str:
        return f"{self.reason} (profile the recipe '{self.calibrate.label()}' to calibrate it)"


def recipe_extrapolation(recipe: Recipe, profiled_recipes: Iterable[Recipe]) -> list[Extrapolation]:
    """What the models fitted on runs of `profiled_recipes` cannot know about `recipe`: empty
    when nothing (frozen layers or checkpointing change amounts only); a precision none of
    them ran names the arithmetic rates at its dtype, an optimizer whose kind of step
    (`Optimizer.step`) none of them ran the rates that price its step."""
    profiled = list(profiled_recipes)
    found = []
    if recipe.precision not in {r.precision for r in profiled}:
        dtype = PRECISIONS[recipe.precision].autocast_dtype or "float32"
        found.append(Extrapolation(
            f"{recipe.precision}: the rate of {dtype} GEMM arithmetic was never measured",
            AUTOCAST_TERMS if PRECISIONS[recipe.precision].autocast_dtype else _ARITHMETIC_TERMS,
            DEFAULT_RECIPE._replace(precision=recipe.precision),
        ))
    steps = sorted({OPTIMIZERS[r.optimizer].step for r in profiled})
    step = OPTIMIZERS[recipe.optimizer].step
    if step not in steps:
        found.append(Extrapolation(
            f"{recipe.optimizer}: a step of {step}'s kind was never timed, priced per pass as "
            f"{', '.join(steps) or 'no optimizer'}'s",
            STEP_TERMS,
            DEFAULT_RECIPE._replace(optimizer=recipe.optimizer),
        ))
    return found
