"""Test configs: made from [profile] keys, read back, and the original tool's own layout."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

from perf4sight.cli import main
from perf4sight.config import ProfileSettings
from perf4sight.errors import ArgumentError, ConfigError
from perf4sight.profile import ProfileTest, create_test_config, profile_campaign, read_test_config
from perf4sight.profile.test_config import find_model_files

ORIGINAL = """[RESNET18]
test_var= ['memory', 'latency']
bs= [2, 8, 16, 32, 64, 128, 256]
dataset= ['imagenet']
net_name= ['resnet18']
exec_stage= ['training', 'inference']
model= ['/home/ar4414/models/pruned/imagenet/random_pruning/resnet18_90.py',
        '/home/ar4414/models/pruned/imagenet/random_pruning/resnet18_0.py',
        '/home/ar4414/models/pruned/imagenet/random_pruning/resnet18_70.py']
"""


def test_original_layout_is_read(tmp_path: Path) -> None:
    path = tmp_path / "resnet18.ini"
    path.write_text(ORIGINAL)
    tests = read_test_config(path)
    assert len(tests) == 2 * 7 * 2 * 3
    first = tests[0]
    assert first == ProfileTest("memory", 2, "imagenet", "resnet18", "training",
                                "/home/ar4414/models/pruned/imagenet/random_pruning/resnet18_90.py")
    assert first.log_name == "resnet18_90"
    assert first.params() == {"test_var": "memory", "bs": 2, "dataset": "imagenet", "net_name": "resnet18",
                              "exec_stage": "training", "model": first.model}
    # grouped by model, stage and variable, batch sizes ascending within each group
    groups: dict[tuple, list[int]] = {}
    for test in tests:
        groups.setdefault(test.group, []).append(test.bs)
    assert len(groups) == 3 * 2 * 2
    assert all(bs == [2, 8, 16, 32, 64, 128, 256] for bs in groups.values())


def test_create_config_round_trip(tmp_path: Path, model_dir: Path) -> None:
    (model_dir / "tinynet_50.json").write_text("{}")  # the .py of the same stem wins
    (model_dir / "tinynet_25.json").write_text("{}")
    (model_dir / "tinynetx_10.py").write_text("")  # another network's file
    settings = ProfileSettings(
        network=["tinynet", "fragile"], dataset="cifar10", bs=[8, 2, 4],
        stage=["training", "inference"], profile_variables=["memory"],
        local_model_loc=model_dir, device_model_loc=Path("/device/models"),
        test_config=tmp_path / "configs" / "test.ini",
    )
    path = create_test_config(settings)
    assert path == settings.test_config
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    assert parser.sections() == ["TINYNET", "FRAGILE"]
    assert parser["TINYNET"]["exec_stage"].strip() == "['training', 'inference']"
    tests = read_test_config(path)
    models = list(dict.fromkeys(t.model for t in tests))
    assert models == ["/device/models/tinynet_0.py", "/device/models/tinynet_25.json",
                      "/device/models/tinynet_50.py", "/device/models/fragile_0.py",
                      "/device/models/fragile_50.py"]
    assert len(tests) == 5 * 3 * 2
    assert {t.dataset for t in tests} == {"cifar10"}
    assert [t.bs for t in tests[:3]] == [2, 4, 8]
    assert {t.net_name for t in tests if "fragile" in t.model} == {"fragile"}


def test_create_config_from_the_cli(tmp_path: Path, model_dir: Path) -> None:
    config = tmp_path / "config.ini"
    config.write_text(
        "[profile]\nnetwork = ['hog']\nbs = [2, 4]\ndataset = cifar10\n"
        f"local_model_loc = {model_dir}\ntest_config = {tmp_path / 'tc.ini'}\n"
    )
    assert main(["--quiet", "profile", "create-config", "--config", str(config)]) == 0
    tests = read_test_config(tmp_path / "tc.ini")
    assert {t.model for t in tests} == {str(model_dir / "hog_0.py"), str(model_dir / "hog_50.py")}
    assert {t.test_var for t in tests} == {"memory", "latency"}


def test_network_prefix_does_not_match_other_networks(model_dir: Path) -> None:
    (model_dir / "tinynet2_0.py").write_text("")
    assert [p.name for p in find_model_files(model_dir, "tinynet")] == ["tinynet_0.py", "tinynet_50.py"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("test_var= ['memory', 'latency']", "test_var= ['power']"), "test_var: unknown value 'power'"),
        (("bs= [2, 8, 16, 32, 64, 128, 256]", "bs= [2, 'x']"), "bs: expected positive integers"),
        (("exec_stage= ['training', 'inference']\n", ""), "missing key 'exec_stage'"),
        (("dataset= ['imagenet']", "dataset= [imagenet"), "dataset: not a Python list literal"),
        (("dataset= ['imagenet']", "dataset= ['mnist']"), "dataset: unknown value 'mnist'"),
    ],
)
def test_bad_test_config_names_file_section_and_key(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    path = tmp_path / "bad.ini"
    path.write_text(ORIGINAL.replace(*change))
    with pytest.raises(ConfigError, match=message) as info:
        read_test_config(path)
    assert f"{path} [RESNET18]" in str(info.value)


def test_create_config_without_models_is_a_config_error(tmp_path: Path, model_dir: Path) -> None:
    settings = ProfileSettings(network=["vgg16"], local_model_loc=model_dir, test_config=tmp_path / "t.ini")
    with pytest.raises(ConfigError, match="network 'vgg16': no model file"):
        create_test_config(settings)
    with pytest.raises(ConfigError, match="local_model_loc"):
        create_test_config(ProfileSettings(network=["tinynet"], test_config=tmp_path / "t.ini"))
    # the network-dataset stage writes into model_path/<dataset> when a dataset is named
    settings = ProfileSettings(network=["tinynet"], local_model_loc=model_dir.parent, test_config=tmp_path / "t.ini")
    with pytest.raises(ConfigError, match=rf"no model file tinynet_<level>\.py or \.json in local_model_loc "
                                          rf"{tmp_path} \(there are some in {model_dir}: set local_model_loc to it\)$"):
        create_test_config(settings)


def test_cli_run_errors_are_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_profile = tmp_path / "no_profile.ini"
    no_profile.write_text("[create_network_dataset]\nnetworks = ['resnet18']\n")
    assert main(["profile", "run", "--config", str(no_profile)]) == 2
    assert f"{no_profile}: no [profile] section" in capsys.readouterr().err
    test_config = tmp_path / "t.ini"
    test_config.write_text(ORIGINAL)
    bad_device = tmp_path / "bad_device.ini"
    bad_device.write_text(f"[profile]\ndevice = tpu\ntest_config = {test_config}\nlog_dir = {tmp_path / 'logs'}\n")
    assert main(["profile", "run", "--config", str(bad_device)]) == 2
    err = capsys.readouterr().err
    assert "unknown device 'tpu'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("bs", "[profile] bs: empty list; expected positive integers"),
        ("stage", "[profile] stage: empty list; expected one or more of training, inference"),
        ("profile_variables", "[profile] profile_variables: empty list; expected one or more of memory, latency"),
    ],
)
def test_create_config_rejects_an_empty_list(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str], key: str, message: str
) -> None:
    """Else it writes a test config with no tests, which `profile run` then rejects, naming that file."""
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\nnetwork = ['tinynet']\n{key} = []\nlocal_model_loc = {model_dir}\n"
                      f"test_config = {tmp_path / 'tc.ini'}\n")
    assert main(["--quiet", "profile", "create-config", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"error: {config}: {message}" in err and "Traceback" not in err
    assert not (tmp_path / "tc.ini").exists()


def test_create_config_rejects_a_non_positive_batch_size(tmp_path: Path, model_dir: Path) -> None:
    settings = ProfileSettings(network=["tinynet"], bs=[2, 0], local_model_loc=model_dir,
                               test_config=tmp_path / "t.ini")
    with pytest.raises(ConfigError, match=r"^bs: expected positive integers, got 0$"):
        create_test_config(settings)
    assert not settings.test_config.exists()


def test_non_utf8_test_config_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    test_config = tmp_path / "latin1.ini"
    test_config.write_bytes(ORIGINAL.replace("resnet18']", "r\u00e9seau']").encode("latin-1"))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(test_config))}: not UTF-8 text"):
        read_test_config(test_config)
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\ntest_config = {test_config}\nlog_dir = {tmp_path / 'logs'}\n")
    assert main(["--quiet", "profile", "run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"error: {test_config}: not UTF-8 text" in err and "Traceback" not in err


def test_max_tests_spreads_the_pairs_over_levels_and_batch_sizes(tmp_path: Path, model_dir: Path) -> None:
    for level in (10, 90):
        (model_dir / f"tinynet_{level}.py").write_text((model_dir / "tinynet_0.py").read_text())
    settings = ProfileSettings(network=["tinynet", "fragile"], bs=[2, 4, 8, 16, 32, 64], profile_variables=["latency"],
                               local_model_loc=model_dir, test_config=tmp_path / "t.ini", max_tests=6)
    tests = read_test_config(create_test_config(settings))
    pairs = [(Path(t.model).stem, t.bs) for t in tests]
    assert len(pairs) == len(set(pairs)) == 6
    # each network in turn: least pruned at the smallest batch size, the far corner, then the farthest left
    assert set(pairs) == {("tinynet_0", 2), ("tinynet_90", 64), ("tinynet_50", 4),
                          ("fragile_0", 2), ("fragile_50", 64), ("fragile_0", 64)}
    # a section per model, in the order of their first picks: a run stopped at its budget has run the first
    assert list(dict.fromkeys(model for model, _ in pairs)) == [
        "tinynet_0", "fragile_0", "tinynet_90", "fragile_50", "tinynet_50"]
    every = read_test_config(create_test_config(ProfileSettings(**{**vars(settings), "max_tests": None})))
    assert len(every) == (4 + 2) * 6 and set(pairs) < {(Path(t.model).stem, t.bs) for t in every}

    settings = ProfileSettings(**{**vars(settings), "max_tests": 0})
    with pytest.raises(ArgumentError, match="max_tests: 0; expected a positive number of tests"):
        create_test_config(settings)


@pytest.mark.slow
def test_a_plan_times_the_networks_here_and_keeps_to_its_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs = tmp_path / "specs"
    assert main(["-q", "prune", "--net", "squeezenet1_1", "--levels", "0,50", "--input-size", "3,32,32",
                 "--num-classes", "10", "--out", str(specs)]) == 0
    config = tmp_path / "c.ini"
    config.write_text(f"[profile]\nnetwork = ['squeezenet1_1']\nbs = [2, 4, 8]\nlocal_model_loc = {specs}\n"
                      f"test_config = {tmp_path / 'tc.ini'}\niterations = 1\nwarmup = 0\nlog_dir = {tmp_path / 'logs'}\n")
    said = ""

    def planned(minutes: str) -> tuple[int, float]:
        nonlocal said
        capsys.readouterr()
        assert main(["profile", "plan", "--config", str(config), "--minutes", minutes]) == 0
        said = " ".join(capsys.readouterr().out.split())
        line = next(line for line in said.split("test config written") if "planned" in line)
        found = re.search(r"planned (\d+) of 6 tests \(model, batch size\), about ([0-9.]+) of", line)
        assert found, line
        tests = read_test_config(tmp_path / "tc.ini")
        assert len({(t.model, t.bs) for t in tests}) == int(found.group(1))
        assert {t.test_var for t in tests} == {"memory", "latency"}
        return int(found.group(1)), float(found.group(2))

    count, estimated = planned("600")
    assert count == 6 and 0 < estimated < 600  # everything fits; its estimate says how long
    assert "already" not in said
    fewer, short = planned(f"{estimated / 2:.3f}")
    assert 1 <= fewer < 6 and short <= estimated / 2 + 0.05
    # what has run: one pair measured, the plan made again counts it as done and times the rest by it
    first = [t for t in read_test_config(tmp_path / "tc.ini") if (Path(t.model).stem, t.bs) == ("squeezenet1_1_0", 2)]
    assert profile_campaign(first, log_dir=tmp_path / "logs", iterations=1, warmup=0).passed == 2
    assert planned("600")[0] == 6
    found = re.search(r"1 of the candidates are in \S+ already: they took ([0-9.]+)x their estimates", said)
    assert found and float(found.group(1)) > 0, said
    capsys.readouterr()
    assert main(["profile", "plan", "--config", str(config), "--minutes", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: --minutes: 0.0; expected minutes above 0 and up to 10080"]
    config.write_text(config.read_text() + "budget_minutes = -1\n")
    assert main(["profile", "create-config", "--config", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {config}: [profile] budget_minutes: -1.0; expected minutes above 0 and up to 10080, or none for no "
        "time budget"]
