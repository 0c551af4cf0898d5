"""Which tests a small campaign runs: a spread over each network's pruning levels and batch sizes.

A fingerprint needs few tests when they cover what the models read: the thinnest and the
widest variant of each network, the smallest and the largest batch size, and between them
as evenly as the budget allows. `spread_tests` picks them network by network in turn, each
pick the candidate farthest from that network's earlier picks in (level, log batch size),
so that any budget is a spread and a larger budget adds to a smaller one's picks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["LEVEL_WEIGHT", "spread_tests"]

# How far apart two pruning levels 100 points apart are, against two batch sizes at either end
# of the range: a network's variants differ in what every model reads, a batch size in one
# amount. On the TX2 logs, 100 tests per variable of three networks gave the fourth within 0.1
# point of all tests on average with 2, against 0.2 / 1.6 (memory / latency) with 1 and 0.5
# (BENCHMARKS.md, "A small campaign").
LEVEL_WEIGHT = 2.0
# Under a time budget a candidate is worth its distance per square root of its seconds (a test
# twice as far is worth four times as long), so that one long corner does not take the budget of
# many spread ones; no test counts as shorter than this.
_SHORTEST_S = 0.1


def spread_tests(tests: pd.DataFrame, budget: int | None = None, *, seconds: float | None = None) -> np.ndarray:
    """The positions in `tests` (columns `net`, `level`, `bs`: one row per candidate test) of
    at most `budget` tests (None: any number) whose `seconds` (a column then) add up to at
    most `seconds` (None: no time budget), the networks taking turns: each network's first
    pick is its least pruned variant at its smallest batch size, each further one the
    candidate farthest from its picks so far (levels over 0-100 times `LEVEL_WEIGHT`, batch
    sizes by their log over the largest's; under a time budget, per square root of its
    seconds); a candidate that no longer fits the time left is passed over."""
    if budget is None:
        budget = len(tests)
    if budget < 0:
        raise ValueError(f"budget {budget}: a number of tests, 0 or more")
    cost = tests["seconds"].to_numpy(dtype=float) if seconds is not None else np.zeros(len(tests))
    left = seconds if seconds is not None else 0.0
    log_bs = np.log2(tests["bs"].to_numpy(dtype=float))
    span = max(float(log_bs.max()), 1.0) if len(tests) else 1.0
    points = np.column_stack([tests["level"].to_numpy(dtype=float) / 100.0 * LEVEL_WEIGHT, log_bs / span])
    remaining = {net: np.flatnonzero((tests["net"] == net).to_numpy()) for net in dict.fromkeys(tests["net"])}
    nearest = {net: np.full(len(rows), np.inf) for net, rows in remaining.items()}
    chosen: list[int] = []
    while len(chosen) < budget and any(len(rows) for rows in remaining.values()):
        for net, rows in remaining.items():
            if len(chosen) == budget or not len(rows):
                continue
            if np.isinf(nearest[net]).all():
                pick = int(np.lexsort((points[rows, 1], points[rows, 0]))[0])  # least pruned, smallest batch
            else:  # under a time budget, the farthest per square root of its seconds
                pick = int(np.argmax(nearest[net] / np.sqrt(np.maximum(cost[rows], _SHORTEST_S))))
            position = int(rows[pick])
            if cost[position] > left and seconds is not None:
                nearest[net] = np.delete(nearest[net], pick)  # too long for what is left: passed over
                remaining[net] = np.delete(rows, pick)
                continue
            left -= cost[position]
            chosen.append(position)
            distance = np.linalg.norm(points[rows] - points[position], axis=1)
            nearest[net] = np.delete(np.minimum(nearest[net], distance), pick)
            remaining[net] = np.delete(rows, pick)
    return np.asarray(chosen, dtype=int)
