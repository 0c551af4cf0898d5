"""The spread of a small campaign over each network's levels and batch sizes."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from perf4sight.profile.selection import spread_tests

LEVELS = (0, 15, 30, 45, 60, 75, 90)
SIZES = (2, 4, 8, 16, 32, 64, 128, 256)


@pytest.fixture
def tests() -> pd.DataFrame:
    rows = [(net, level, bs) for net in ("resnet18", "squeezenet") for level, bs in itertools.product(LEVELS, SIZES)]
    return pd.DataFrame(rows, columns=["net", "level", "bs"]).sample(frac=1.0, random_state=0).reset_index(drop=True)


def _picked(tests: pd.DataFrame, budget: int) -> list[tuple[str, int, int]]:
    return [tuple(row) for row in tests.iloc[spread_tests(tests, budget)].itertuples(index=False)]


def test_networks_take_turns_from_the_least_pruned_smallest_batch_to_the_far_corner(tests: pd.DataFrame) -> None:
    picked = _picked(tests, 4)
    assert picked == [("resnet18", 0, 2), ("squeezenet", 0, 2), ("resnet18", 90, 256), ("squeezenet", 90, 256)]


def test_a_larger_budget_adds_to_a_smaller_ones_picks_and_spreads_them(tests: pd.DataFrame) -> None:
    small, large = _picked(tests, 10), _picked(tests, 30)
    assert large[:10] == small and len(set(large)) == 30
    for net in ("resnet18", "squeezenet"):
        mine = [(level, bs) for n, level, bs in large if n == net]
        assert len(mine) == 15
        sizes = {bs for _, bs in mine}
        assert {level for level, _ in mine} == set(LEVELS) and {2, 256} <= sizes and len(sizes) >= 5


def test_a_budget_beyond_the_candidates_takes_them_all_and_none_takes_none(tests: pd.DataFrame) -> None:
    assert sorted(spread_tests(tests, 1000)) == list(range(len(tests)))
    assert len(spread_tests(tests, 0)) == 0
    with pytest.raises(ValueError, match="budget -1"):
        spread_tests(tests, -1)


def test_a_time_budget_keeps_the_picks_within_it_passing_over_what_no_longer_fits(tests: pd.DataFrame) -> None:
    timed = tests.assign(seconds=tests["bs"] * (1 + tests["level"] / 100))  # a test's time grows with its batch
    picked = timed.iloc[spread_tests(timed, seconds=600.0)]
    assert picked["seconds"].sum() <= 600.0 and len(picked) > 20
    for net in ("resnet18", "squeezenet"):  # each network spread over its levels and batch sizes
        mine = picked[picked["net"] == net]
        assert {0, 90} <= set(mine["level"]) and mine["bs"].nunique() >= 4
    everything = timed.iloc[spread_tests(timed, seconds=float(timed["seconds"].sum()))]
    assert len(everything) == len(timed)  # a budget for all of them runs all of them
    assert len(spread_tests(timed, 5, seconds=1e9)) == 5  # the count still bounds
    assert len(spread_tests(timed, seconds=1.0)) == 0  # no test is that short
