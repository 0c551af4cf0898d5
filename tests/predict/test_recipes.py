"""Predicting under a training recipe, from models fingerprinted on the H200's default-recipe
runs in the repository: the recipe changes the exact amounts and is named, the memory's
breakdown sums to the prediction, what the fit cannot know is told, bad values are one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from repository_data import H200

from perf4sight import console
from perf4sight.cli import main
from perf4sight.config import FingerprintSettings
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.device.recipe import DEFAULT_RECIPE, Recipe
from perf4sight.fit import fingerprint_device
from perf4sight.predict import Predictor, plan_variants

UNSEEN = H200 / "models" / "vgg11_30.json"  # a family never profiled: no correction
MIB = float(1 << 20)
PARTS = ["runtime_mib", "weights_mib", "gradients_mib", "optimizer_state_mib", "saved_activations_mib",
         "workspace_cache_mib", "floor_mib", "adjustment_mib"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("h200") / "models"
    console.set_quiet(True)
    fingerprint_device(FingerprintSettings(
        train_nets=["resnet18", "googlenet", "squeezenet"], train_logs=[0, 30, 90], eval_nets=[], eval_logs=[],
        memory_logs=[H200 / "memory"], latency_logs=[H200 / "latency"], pruned_models_storedir=H200 / "models",
        model_storedir=out, method="physical", report=None,
    ))
    console.set_quiet(False)
    return out


@pytest.fixture(scope="module")
def predictor(models: Path) -> Predictor:
    return Predictor.load(models)


def test_the_optimizer_changes_the_memory_by_its_state(predictor: Predictor) -> None:
    sgd = predictor.predict(UNSEEN, [8, 64], breakdown=True)
    adam = predictor.predict(UNSEEN, [8, 64], recipe=Recipe(optimizer="adam"), breakdown=True)
    plain = predictor.predict(UNSEEN, [8, 64], recipe=Recipe(optimizer="sgd-plain"), breakdown=True)
    assert predictor.models[MEMORY.name].recipes_ == [DEFAULT_RECIPE]
    assert list(sgd["recipe"]) == [DEFAULT_RECIPE.label()] * 2 and set(adam["recipe"]) == {"adam, fp32, train all"}
    weights = sgd["weights_mib"].to_numpy()
    np.testing.assert_allclose(adam["optimizer_state_mib"], 2 * weights)
    np.testing.assert_allclose(plain["optimizer_state_mib"], 0 * weights)
    np.testing.assert_allclose(sgd["gradients_mib"], weights)
    # SGD's momentum, one parameter-sized buffer, is what adam adds once more and plain SGD lacks
    np.testing.assert_allclose(adam[MEMORY.name] - sgd[MEMORY.name], weights, rtol=0.02)
    np.testing.assert_allclose(sgd[MEMORY.name] - plain[MEMORY.name], weights, rtol=0.02)
    # its step's cost per pass no profiled run showed: latency extrapolated, the memory exact
    assert set(adam["extrapolated_recipe"]) == {
        "adam: a step of adam's kind was never timed, priced per pass as sgd's (profile the recipe "
        "'adam, fp32, train all' to calibrate it)"}
    assert adam["extrapolated"].all()
    assert not sgd["extrapolated_recipe"].any() and not plain["extrapolated_recipe"].any()
    for table in (sgd, adam, plain):
        np.testing.assert_allclose(table[PARTS].sum(axis=1), table[MEMORY.name], rtol=1e-9)


def test_frozen_layers_and_checkpointing_save_less(predictor: Predictor) -> None:
    every = predictor.predict("resnet18", [64], breakdown=True).iloc[0]
    head = predictor.predict("resnet18", [64], recipe=Recipe(trainable="classifier"), breakdown=True).iloc[0]
    late = predictor.predict("resnet18", [64], recipe=Recipe(trainable="layer4"), breakdown=True).iloc[0]
    segments = predictor.predict("resnet18", [64], recipe=Recipe(checkpoint_segments=4), breakdown=True).iloc[0]
    assert head["gradients_mib"] < late["gradients_mib"] < every["gradients_mib"]
    assert head["gradients_mib"] == pytest.approx((512 * 1000 + 1000) * 4 / MIB)  # fc alone
    assert head["saved_activations_mib"] < late["saved_activations_mib"] < every["saved_activations_mib"]
    assert segments["saved_activations_mib"] < every["saved_activations_mib"]
    assert segments[LATENCY.name] > every[LATENCY.name]  # the segments' forward passes run again
    assert head[MEMORY.name] < late[MEMORY.name] < every[MEMORY.name]


def test_gradients_cleared_first_lower_the_memory_by_those_not_yet_made_again(predictor: Predictor) -> None:
    """A step that clears the gradients before the forward pass (PyTorch's tutorials' loop) holds
    at the peak only the gradients the backward pass has made by then: the memory is lower by
    the rest, the latency the same, nothing extrapolated (an exact amount changed)."""
    after = predictor.predict("mobilenet_v2", [8, 64], breakdown=True)
    first = predictor.predict("mobilenet_v2", [8, 64], recipe=Recipe(zero_grad="first"), breakdown=True)
    assert set(first["recipe"]) == {"sgd, fp32, train all, zero_grad first"}
    saved = (after["gradients_mib"] - first["gradients_mib"]).to_numpy()
    assert (saved > 0).all() and (first["gradients_mib"] > 0).all()
    np.testing.assert_allclose(after[MEMORY.name] - first[MEMORY.name], saved, rtol=0.02)
    np.testing.assert_array_equal(after[LATENCY.name], first[LATENCY.name])
    assert not first["extrapolated_recipe"].any()


def test_a_precision_never_profiled_is_extrapolated_and_names_what_calibrates_it(predictor: Predictor) -> None:
    table = predictor.predict("resnet18", [8, 64], recipe=Recipe(precision="amp-bf16"))
    assert table["extrapolated"].all()
    assert set(table["extrapolated_recipe"]) == {
        "amp-bf16: the rate of bfloat16 GEMM arithmetic was never measured "
        "(profile the recipe 'sgd, amp-bf16, train all' to calibrate it)"}
    fp32 = predictor.predict("resnet18", [8, 64])
    assert set(fp32["extrapolated_recipe"]) == {""}


def test_plan_searches_the_recipes_too(predictor: Predictor) -> None:
    recipes = [DEFAULT_RECIPE, Recipe(trainable="layer4"), Recipe(optimizer="adam")]
    table = plan_variants(predictor=predictor, network="resnet18", levels=[0, 50], budget_mib=2500.0, recipes=recipes)
    assert set(table["recipe"]) == {recipe.label() for recipe in recipes}
    assert len(table) == 6 and table["images_per_s"].is_monotonic_decreasing


@pytest.mark.parametrize("net", ["resnet18", str(H200 / "models" / "resnet18_30.json")])
def test_the_cli_answers_for_a_recipe_with_its_breakdown(models: Path, net: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--models", str(models), "--net", net, "--bs", "8,32", "--optimizer", "adam",
                 "--precision", "amp-bf16", "--trainable", "classifier", "--checkpoint-segments", "4",
                 "--breakdown", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["batch_size"] for row in rows] == [8, 32]
    assert {row["recipe"] for row in rows} == {"adam, amp-bf16, train classifier, checkpoint 4 segments"}
    for row in rows:
        assert sum(row[part] for part in PARTS) == pytest.approx(row[MEMORY.name], rel=1e-9)
        assert row["extrapolated"] and "profile the recipe 'sgd, amp-bf16, train all'" in row["extrapolated_recipe"]
        assert "profile the recipe 'adam, fp32, train all'" in row["extrapolated_recipe"]
    assert main(["predict", "--models", str(models), "--net", net, "--bs", "8", "--optimizer", "sgd,adam",
                 "--breakdown"]) == 0
    shown = capsys.readouterr().out
    assert "what the memory is made of (MiB)" in shown and "adam, fp32, train all" in shown


@pytest.mark.parametrize(("options", "message"), [
    (["--optimizer", "lion"], "error: optimizer: unknown value 'lion'; expected one of sgd, sgd-plain, adam, adamw"),
    (["--precision", "fp8"], "error: precision: unknown value 'fp8'"),
    (["--trainable", "layer9"], "error: trainable: no layer 'layer9' in the network"),
    (["--checkpoint-segments", "40"], "error: checkpoint_segments: 40 segments, the network has 13 top-level blocks"),
    (["--checkpoint-segments", "two"], "error: --checkpoint-segments: expected comma-separated non-negative integers"),
    (["--zero-grad", "last"], "error: zero_grad: unknown value 'last'; expected one of after-loss, first"),
])
def test_a_bad_recipe_is_one_line_and_exit_2(models: Path, options: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--models", str(models), "--net", "resnet18", *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err, err

