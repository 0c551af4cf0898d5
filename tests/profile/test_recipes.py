"""Profiling with training recipes: the [profile] recipe keys, the test config's recipe keys,
log rows that record their recipe, resuming per recipe, and bad recipe values refused in
one line before anything runs."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perf4sight.cli import main
from perf4sight.config import ProfileSettings, load_config
from perf4sight.device.definitions import MEMORY
from perf4sight.device.logs import GT_COLUMNS, read_gt
from perf4sight.device.recipe import DEFAULT_RECIPE, RECIPE_COLUMNS, Recipe
from perf4sight.errors import ArgumentError, ConfigError, LogFormatError
from perf4sight.fit import ArchitectureCatalog, CalibratedModel, Fingerprint, build_dataset, load_model, save_models
from perf4sight.fit.logs import read_logs
from perf4sight.profile import profile_campaign, read_test_config
from perf4sight.profile.campaign import check_settings
from perf4sight.profile.test_config import network_recipes
from perf4sight.profile.test_config import test_config_text as section_text

ROOT = Path(__file__).resolve().parents[2]
SECTION = ("[TINYNET]\ntest_var= ['memory', 'latency']\nbs= [2, 4]\ndataset= ['cifar10']\nnet_name= ['tinynet']\n"
           "exec_stage= ['training', 'inference']\nmodel= ['{model}']\n")


def test_the_recipe_keys_of_a_section_are_a_dimension_of_its_tests(tmp_path: Path) -> None:
    path = tmp_path / "t.ini"
    path.write_text(SECTION.format(model="m.py") + "optimizer= ['sgd', 'adam']\nprecision= ['fp32', 'amp-bf16']\n"
                    "trainable= ['all', '3']\ncheckpoint_segments= [0, 2]\n")
    tests = read_test_config(path)
    training = [t for t in tests if t.stage == "training"]
    assert len(training) == 2 * 2 * 16  # test_var x bs x recipes
    assert {t.recipe for t in training} == {Recipe(o, p, t, c) for o in ("sgd", "adam") for p in ("fp32", "amp-bf16")
                                            for t in ("all", "3") for c in (0, 2)}
    inference = [t for t in tests if t.stage == "inference"]  # trains nothing: its precision alone
    assert {t.recipe for t in inference} == {Recipe(), Recipe(precision="amp-bf16")} and len(inference) == 8
    assert len({t.key for t in tests}) == len(tests)
    plain = tmp_path / "original.ini"
    plain.write_text(SECTION.format(model="m.py"))
    assert {t.recipe for t in read_test_config(plain)} == {DEFAULT_RECIPE}


@pytest.mark.parametrize(("text", "message"), [
    ("optimizer= ['sgd', 'lion']\n", "optimizer: unknown value 'lion'; expected one of sgd, sgd-plain, adam, adamw"),
    ("checkpoint_segments= [-1]\n", "checkpoint_segments: -1 is not 0 (none) or a positive integer"),
    ("precision= ['fp8']\n", "precision: unknown value 'fp8'"),
])
def test_a_bad_recipe_value_in_a_test_config_names_the_file_section_and_key(tmp_path: Path, text: str,
                                                                            message: str) -> None:
    path = tmp_path / "t.ini"
    path.write_text(SECTION.format(model="m.py") + text)
    with pytest.raises(ConfigError) as info:
        read_test_config(path)
    assert str(info.value).startswith(f"{path} [TINYNET] {message}")


def test_the_test_config_written_holds_each_networks_recipes() -> None:
    settings = ProfileSettings(network=["resnet18", "squeezenet"], bs=[2], optimizer=["sgd", "adamw"],
                               trainable=["all", "resnet18:layer4", "squeezenet:features.12"])
    text = section_text(settings, {"resnet18": ["r.json"], "squeezenet": ["s.json"]})
    assert "optimizer= ['sgd', 'adamw']\ntrainable= ['all', 'layer4']\n" in text
    assert "optimizer= ['sgd', 'adamw']\ntrainable= ['all', 'features.12']\n" in text
    assert "precision" not in text and "checkpoint_segments" not in text  # the default's alone: not written
    default = section_text(ProfileSettings(network=["resnet18"], bs=[2]), {"resnet18": ["r.json"]})
    assert not any(key in default for key in RECIPE_COLUMNS)


@pytest.mark.parametrize(("changes", "message"), [
    ({"optimizer": ["adam", "lion"]}, "optimizer: unknown value 'lion'"),
    ({"precision": ["amp-fp16"]}, "precision amp-fp16 needs a CUDA device, not cpu"),
    ({"trainable": ["resnet18:layer9"]}, "trainable: no layer 'layer9' in resnet18; layers there include conv1"),
    ({"trainable": ["vgg11:features.3"]}, "trainable: 'vgg11:features.3' names no layer of a [profile] network"),
    ({"checkpoint_segments": [4, 14]}, "checkpoint_segments: 14 segments, resnet18 has 13 top-level blocks"),
    ({"zero_grad": ["first", "last"]}, "zero_grad: unknown value 'last'; expected one of after-loss, first"),
])
def test_the_profile_stage_check_refuses_bad_recipes(tmp_path: Path, changes: dict, message: str) -> None:
    settings = ProfileSettings(network=["resnet18"], bs=[2], local_model_loc=tmp_path, dataset="cifar10", **changes)
    with pytest.raises(ArgumentError) as info:
        check_settings(settings)
    assert str(info.value).startswith(message)


def test_fp16_is_refused_only_where_the_tests_run(tmp_path: Path) -> None:
    """A test config made on the host for a CUDA device is no CPU run."""
    check_settings(ProfileSettings(network=["resnet18"], bs=[2], local_model_loc=tmp_path, precision=["amp-fp16"],
                                   run_profiling=False))


@pytest.mark.parametrize(("key", "value", "message"), [
    pytest.param("optimizer", "['sgd', 'lion']", "optimizer: unknown value 'lion'",
                 marks=pytest.mark.slow),  # main.py in a new process too
    ("trainable", "['all', 'layer9']", "trainable: no layer 'layer9' in resnet18"),
    ("precision", "['amp-fp16']", "precision amp-fp16 needs a CUDA device, not cpu"),
    ("checkpoint_segments", "[40]", "checkpoint_segments: 40 segments, resnet18 has 13 top-level blocks"),
])
def test_main_py_exits_2_with_one_line_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            key: str, value: str, message: str) -> None:
    config = tmp_path / "config.ini"
    config.write_text(f"[create_network_dataset]\nnetworks = ['resnet18']\nmodel_path = {tmp_path}/models\n"
                      f"[profile]\nnetwork = ['resnet18']\nlocal_model_loc = {tmp_path}/models\n"
                      f"log_dir = {tmp_path}/logs\n{key} = {value}\n")
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {config}: [profile] {message}") and "\n" not in err, err
    assert not (tmp_path / "models").exists()  # pruning did not run
    if key == "optimizer":  # the original's entry point too
        done = subprocess.run([sys.executable, str(ROOT / "main.py"), "--config-file", str(config)],
                              capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.strip().startswith(f"error: {config}: [profile] {message}"), done.stderr


def _recipe_config(path: Path, model: Path, extra: str) -> Path:
    path.write_text(SECTION.format(model=model).replace("'training', 'inference'", "'training'") + extra)
    return path


@pytest.mark.slow
def test_one_log_folder_holds_several_recipes_and_resumes_each(tmp_path: Path, model_dir: Path) -> None:
    """A real campaign of tinynet under four recipes at one batch size: each -gt.csv row records
    its recipe after the original's columns, the host's reader keeps every recipe's rows, and
    a second run of the same test config runs nothing."""
    model = model_dir / "tinynet_0.py"
    config = _recipe_config(tmp_path / "t.ini", model, "optimizer= ['sgd', 'adam']\ntrainable= ['all', '3']\n"
                            "precision= ['amp-bf16']\ncheckpoint_segments= [2]\nzero_grad= ['first']\n")
    config.write_text(config.read_text().replace("bs= [2, 4]", "bs= [2]"))
    tests = read_test_config(config)
    log_dir = tmp_path / "logs"
    summary = profile_campaign(tests, log_dir=log_dir, device="cpu", iterations=1, warmup=0)
    assert (summary.passed, summary.failed) == (8, 0)
    for variable in ("memory", "latency"):
        gt = pd.read_csv(log_dir / variable / "tinynet_0-gt.csv", sep="|")
        assert list(gt.columns) == GT_COLUMNS[variable]
        assert list(gt.columns[-len(RECIPE_COLUMNS) - 1:-1]) == list(RECIPE_COLUMNS)
        assert sorted(zip(gt["optimizer"], gt["trainable"].astype(str), gt["bs"])) == sorted(
            (o, t, b) for o in ("sgd", "adam") for t in ("all", "3") for b in (2,))
        assert set(gt["precision"]) == {"amp-bf16"} and set(gt["checkpoint_segments"]) == {2}
        assert set(gt["zero_grad"]) == {"first"}
    frame = read_logs(["tinynet"], [0], [log_dir / "memory"], [MEMORY])
    assert len(frame) == 4 and frame[list(RECIPE_COLUMNS)].drop_duplicates().shape[0] == 4
    again = profile_campaign(tests, log_dir=log_dir, device="cpu", iterations=1, warmup=0)
    assert again.passed + again.failed == 0

    # the fit: each run's architecture under its own recipe, the recipes kept with the model
    data = build_dataset(frame, target=MEMORY.name, feature_set="network", stage="training",
                         catalog=ArchitectureCatalog(model_dir))
    recipes = data.recipes()
    assert len(recipes) == 4 and {r.optimizer for r in recipes} == {"sgd", "adam"}
    assert all(arch.recipe == recipe for arch, *recipe in data.rows[["architecture", *RECIPE_COLUMNS]].itertuples(
        index=False, name=None) for recipe in [Recipe(*recipe)])
    trained = np.array([arch.trainable_params * arch.dtype_bytes for arch in data.rows["architecture"]], dtype=float)
    state = data.features["optimizer_state_bytes"] / trained
    np.testing.assert_array_equal(state, np.where(data.rows["optimizer"] == "adam", 2.0, 1.0))
    assert (data.features["gradient_bytes"] <= trained).all()  # cleared first: those made again at the peak
    assert data.rows["family"].nunique() == 4  # corrections measured under one recipe correct no other
    model = CalibratedModel("physical", MEMORY.name).fit(data.rows, data.target)
    save_models([model], storedir=tmp_path / "fitted", fingerprint=Fingerprint("cpu", "recipes", "2026-12-03T12:00:00+00:00"))
    assert set(load_model(tmp_path / "fitted", stage="training", target=MEMORY.name).recipes_) == set(recipes)


def test_a_recipe_the_model_cannot_run_is_refused_before_the_campaign(tmp_path: Path, model_dir: Path) -> None:
    config = _recipe_config(tmp_path / "t.ini", model_dir / "tinynet_0.py", "checkpoint_segments= [9]\n")
    with pytest.raises(ConfigError, match=r"^test config: model .*tinynet_0\.py: checkpoint_segments: 9 segments, "
                                          r"tinynet has 8 top-level blocks$"):
        profile_campaign(read_test_config(config), log_dir=tmp_path / "logs", device="cpu")
    assert not (tmp_path / "logs").exists()


def test_a_log_without_recipe_columns_reads_as_the_default_recipe(tmp_path: Path) -> None:
    """The original's `-gt.csv` (and any log written before recipes): every row ran the default."""
    path = tmp_path / "resnet18_0-gt.csv"
    path.write_text("passed|mem_used|test_var|bs|dataset|net_name|model|stage\n"
                    "True|120.5|memory|2|cifar10|resnet18|resnet18_0.py|training\n"
                    "True|130.5|memory|4|cifar10|resnet18|resnet18_0.py|training\n")
    header, rows = read_gt(path, ["mem_used"])
    assert header[-len(RECIPE_COLUMNS):] == list(RECIPE_COLUMNS)
    assert all(Recipe(*(row[c] for c in RECIPE_COLUMNS)) == DEFAULT_RECIPE for row in rows)
    frame = read_logs(["resnet18"], [0], [tmp_path], [MEMORY])
    assert list(frame["optimizer"]) == ["sgd", "sgd"] and list(frame["checkpoint_segments"]) == [0, 0]
    assert list(frame["zero_grad"]) == ["after-loss", "after-loss"]
    # a log of the recipes before `zero_grad`: its runs cleared the gradients after the loss
    path.write_text("passed|mem_used|bs|model|optimizer|precision|trainable|checkpoint_segments\n"
                    "True|1.0|2|resnet18_0.py|adam|fp32|all|0\n")
    (row,) = read_gt(path, ["mem_used"])[1]
    assert Recipe(*(row[c] for c in RECIPE_COLUMNS)) == Recipe(optimizer="adam", zero_grad="after-loss")
    path.write_text("passed|mem_used|bs|model|optimizer\nTrue|1.0|2|resnet18_0.py|lion\n")
    with pytest.raises(LogFormatError, match=r"resnet18_0-gt\.csv: line 2 optimizer: unknown value 'lion'"):
        read_gt(path, ["mem_used"])


EXAMPLE = ROOT / "examples" / "cpu_recipes.ini"
LAST_STAGES = {"resnet18": "layer4", "resnet50": "layer4", "mobilenetv2": "features.14", "squeezenet": "features.12",
               "alexnet": "features.6", "vgg11": "features.16", "googlenet": "inception5a", "mnasnet": "layers.12"}


def test_the_recipe_example_profiles_the_grid_on_the_held_out_networks() -> None:
    """examples/cpu_recipes.ini: cpu_heldout.ini's networks, every value of the grid (sgd / adam
    / adamw x fp32 / bf16 x all / classifier / the last stage x no checkpointing / 4 segments),
    each network's last stage a layer it has, 4 segments no more than its blocks."""
    settings = load_config(EXAMPLE).profile
    assert settings.network == load_config(ROOT / "examples" / "cpu_heldout.ini").profile.network
    for network in settings.network:
        assert set(network_recipes(settings, network)) == {
            Recipe(o, p, t, c) for o in ("sgd", "adam", "adamw") for p in ("fp32", "amp-bf16")
            for t in ("all", "classifier", LAST_STAGES[network]) for c in (0, 4)}
    check_settings(settings)


@pytest.mark.slow
def test_a_tiny_recipe_example_runs_end_to_end(tmp_path: Path) -> None:
    """The example cut to one network, two recipes and one batch size, pruned, profiled and
    logged through `perf4sight run`."""
    parser = configparser.ConfigParser()
    parser.read(EXAMPLE)
    for section in ("create_network_dataset", "profile"):
        for key in parser[section]:
            if parser[section][key].startswith("out/recipes"):
                parser[section][key] = parser[section][key].replace("out/recipes", str(tmp_path))
    parser["create_network_dataset"].update(networks="['squeezenet']", pruning_perc="[0]")
    parser["profile"].update(network="['squeezenet']", bs="[2]", optimizer="['adamw']", precision="['amp-bf16']",
                             trainable="['all', 'squeezenet:features.12']", checkpoint_segments="[4]",
                             iterations="1")
    config = tmp_path / "tiny.ini"
    with config.open("w") as handle:
        parser.write(handle)
    assert main(["--quiet", "run", "--config", str(config)]) == 0
    for variable in ("memory", "latency"):
        gt = pd.read_csv(tmp_path / "logs" / variable / "squeezenet_0-gt.csv", sep="|")
        assert gt["passed"].all(), gt["error"]
        assert sorted(zip(gt["trainable"], gt["bs"])) == [("all", 2), ("features.12", 2)]
        assert set(gt["optimizer"]) == {"adamw"} and set(gt["checkpoint_segments"]) == {4}
