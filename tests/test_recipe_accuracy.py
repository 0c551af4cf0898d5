"""The recipe benchmark's own arithmetic (how runs group by recipe, the largest batch size
within a budget, a clean exit where its logs are absent) and the re-measuring of disturbed
latency tests that its profiling runs on a shared machine."""

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


def test_disturbed_latency_tests_are_forgotten_and_the_rest_kept(tmp_path: Path) -> None:
    import remeasure_disturbed
    from perf4sight.device.logs import GT_SUFFIX, append_row, read_gt, read_journal

    journal = tmp_path / "latency" / "net_0.csv"
    for bs, share in ((4, 0.01), (8, 0.5), (16, None)):
        params = {"test_var": "latency", "bs": bs, "dataset": "spec", "net_name": "net", "exec_stage": "training",
                  "model": "models/net_0.json"}
        append_row(journal, "latency", {"passed": True, "status": "ok", "params": params, "latency": 10.0 * bs,
                                        "latency_iters_ms": [10.0 * bs] * 2, "cpu_elsewhere": share})
    assert remeasure_disturbed.forget_disturbed(journal) == 1
    assert [row["params"]["bs"] for row in read_journal(journal)] == [4, 16]
    _, rows = read_gt(journal.with_name("net_0" + GT_SUFFIX), ["latency"])
    assert [row["bs"] for row in rows] == [4, 16]
    assert remeasure_disturbed.forget_disturbed(journal) == 0
