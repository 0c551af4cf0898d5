"""The recipe benchmark's own arithmetic: how runs group by recipe, the largest batch size
within a budget, and a clean exit where its logs are absent."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perf4sight.device.recipe import DEFAULT_RECIPE, Recipe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import recipe_accuracy  # noqa: E402  (a script of benchmarks/, not a package)


def test_recipe_groups_name_what_changed_and_pool_the_networks_last_stages() -> None:
    assert recipe_accuracy.recipe_group(DEFAULT_RECIPE) == "default"
    assert recipe_accuracy.recipe_group(Recipe(optimizer="adamw")) == "adamw"
    assert recipe_accuracy.recipe_group(Recipe(trainable="layer4")) == "last stage"
    assert recipe_accuracy.recipe_group(Recipe(trainable="features.14")) == "last stage"
    combined = Recipe(optimizer="adam", precision="amp-bf16", trainable="classifier", checkpoint_segments=4)
    assert recipe_accuracy.recipe_group(combined) == "adam + amp-bf16 + classifier + 4 segments"


def test_largest_batch_size_within_each_budget() -> None:
    memory = pd.DataFrame([[100.0, 300.0], [250.0, 260.0]], columns=[4, 16])
    answers = recipe_accuracy.largest_fitting(memory, np.array([50.0, 100.0, 255.0, 300.0]))
    assert answers.tolist() == [[0, 4, 4, 16], [0, 0, 4, 16]]


def test_absent_logs_are_skipped_with_a_word(tmp_path: Path, capsys) -> None:
    assert recipe_accuracy.main(["--logs", str(tmp_path / "logs"), "--models", str(tmp_path)]) == 0
    assert "nothing to benchmark" in capsys.readouterr().out
