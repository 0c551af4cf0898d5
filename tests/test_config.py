"""Config parsing: a valid file and each kind of invalid input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perf4sight.cli import main
from perf4sight.config import ProfileSettings, load_config, load_section
from perf4sight.errors import ConfigError

VALID = """
[create_network_dataset]
networks = ['resnet18', 'mobilenetv2']
pruning_perc = [0, 5, 10]
mode = l1-norm
model_path = out/models
input_size = [3, 64, 64]
num_classes = 10

[profile]
network = resnet18
bs = [2, 4]
till_first_fail = True
device = cpu

[fingerprint]
train_nets = ['resnet18']
train_logs = [0, 10]
eval_logs = [5]
memory_logs = ['out/logs/memory']
pruned_models_storedir = out/models
model_storedir = out/fitted
report = None
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.ini"
    path.write_text(text)
    return path


def test_valid_config_is_typed(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VALID))
    assert config.sections() == ["create_network_dataset", "profile", "fingerprint"]
    nets = config.create_network_dataset
    assert nets.networks == ["resnet18", "mobilenetv2"]
    assert nets.pruning_perc == [0, 5, 10]
    assert nets.mode == "l1-norm"
    assert nets.model_path == Path("out/models")
    assert nets.input_size == [3, 64, 64]
    assert nets.seed == 0  # default
    assert config.profile.network == ["resnet18"]  # a bare word is a one-element list
    assert config.profile.till_first_fail is True
    assert config.fingerprint.memory_logs == [Path("out/logs/memory")]
    assert config.fingerprint.report is None
    assert config.fingerprint.evaluate is False


def test_the_profile_recipe_keys_are_lists_defaulting_to_the_default_recipe(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[profile]\noptimizer = adamw\ncheckpoint_segments = [0, 4]\n"
                                         "trainable = ['all', 'resnet18:layer4']\n"))
    assert config.profile.optimizer == ["adamw"]  # a bare word is a one-element list
    assert config.profile.checkpoint_segments == [0, 4]
    assert config.profile.trainable == ["all", "resnet18:layer4"]
    assert config.profile.precision == ["fp32"]
    with pytest.raises(ConfigError, match=r"\[profile\] checkpoint_segments: expected int, got 'four'$"):
        load_config(write(tmp_path, "[profile]\ncheckpoint_segments = ['four']\n"))


def test_sections_are_optional(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[profile]\nbs = [8]\n"))
    assert config.sections() == ["profile"]
    assert config.create_network_dataset is None


def test_the_originals_profile_halves_and_spec_folder(tmp_path: Path) -> None:
    """create_config / run_profiling as the original reads them; a dataset named in [profile]
    puts the specs in model_path/<dataset>, where the original wrote them."""
    text = VALID.replace("device = cpu", "device = cpu\ndataset = imagenet\ncreate_config = False\nrun_profiling = False")
    config = load_config(write(tmp_path, text))
    assert (config.profile.create_config, config.profile.run_profiling) == (False, False)
    assert config.create_network_dataset.dataset == "imagenet"
    assert config.create_network_dataset.spec_dir == Path("out/models/imagenet")
    defaults = load_config(write(tmp_path, VALID))
    assert (defaults.profile.create_config, defaults.profile.run_profiling) == (True, True)
    assert defaults.create_network_dataset.spec_dir == Path("out/models")  # dataset 'spec': model_path itself


def test_fingerprint_folders_missing_from_the_originals_config_are_taken_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = re.sub(r"(pruned_models_storedir|model_storedir) = .*\n", "", VALID).replace("device = cpu", "dataset = cifar10")
    config = load_config(write(tmp_path, text))
    assert config.fingerprint.pruned_models_storedir == Path("out/models/cifar10")
    assert config.fingerprint.model_storedir == Path("out/fitted")
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert "[fingerprint]: no pruned_models_storedir or model_storedir; using pruned_models_storedir = " \
           "out/models/cifar10 (the specs of [create_network_dataset]), model_storedir = out/fitted (the default)" in line
    alone = write(tmp_path, "[fingerprint]\ntrain_nets = ['resnet18']\ntrain_logs = [0]\n")
    with pytest.raises(ConfigError, match="missing required key 'pruned_models_storedir'"):
        load_config(alone)  # no [create_network_dataset] to take the specs from


def test_load_section_names_the_file_and_the_absent_section(tmp_path: Path) -> None:
    path = write(tmp_path, "[profile]\nbs = [8]\n")
    assert load_section(path, "profile") == ProfileSettings(bs=[8])
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: no \[fingerprint\] section$"):
        load_section(path, "fingerprint")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[prune]\nnetworks = ['a']\n", "unknown section [prune]"),
        ("[profile]\nbatch = [2]\n", "[profile]: unknown key 'batch'"),
        ("[profile]\nbs = [2, 'x']\n", "[profile] bs: expected int, got 'x'"),
        ("[profile]\ngpu_id = 1.5\n", "[profile] gpu_id: expected int, got 1.5"),
        ("[profile]\ntill_first_fail = maybe\n", "till_first_fail: expected bool, got 'maybe'"),
        ("[create_network_dataset]\npruning_perc = [0]\n", "missing required key 'networks'"),
        ("[profile]\nbs = [2\n", "bs: '[2' is not a Python list literal"),
        ("[create_network_dataset]\nnetworks = [resnet18, squeezenet]\n",
         "networks: '[resnet18, squeezenet]' is not a Python list literal (strings in quotes"),
        ("no section here\n", "cannot parse"),
        ("", "no sections"),
    ],
)
def test_invalid_configs_name_what_is_wrong(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load_config(write(tmp_path, text))
    assert expected in str(info.value)
    assert str(tmp_path / "config.ini") in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.ini")


def test_literals_are_never_evaluated(tmp_path: Path) -> None:
    text = "[create_network_dataset]\nnetworks = __import__('os').getcwd()\n"
    config = load_config(write(tmp_path, text))
    # Not a literal: kept as one (odd) network name, never executed.
    assert config.create_network_dataset.networks == ["__import__('os').getcwd()"]


def test_cli_reports_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[profile]\nbatch = [2]\n")
    assert main(["run", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "unknown key 'batch'" in lines[0]
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("example", sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.ini")),
                         ids=lambda path: path.name)
def test_the_shipped_examples_load_and_name_known_networks(example: Path) -> None:
    from perf4sight.networks import known_networks

    config = load_config(example)
    assert config.sections()[:2] == ["create_network_dataset", "profile"]
    nets = config.create_network_dataset.networks
    assert set(nets) <= set(known_networks())
    assert set(config.profile.network) <= set(nets)
    if "fingerprint" not in config.sections():  # data for a benchmark, fitted by it
        return
    fitted = config.fingerprint
    assert set(fitted.train_nets) | set(fitted.eval_nets) <= set(config.profile.network)
    assert set(fitted.train_logs) | set(fitted.eval_logs) <= set(config.create_network_dataset.pruning_perc)


def test_a_comment_after_a_value_is_no_part_of_it(tmp_path: Path) -> None:
    text = ("[create_network_dataset]\nnetworks = ['resnet18'] # the base\nmodel_path = out/models ; specs\n"
            "num_classes = 10\t; ten\n")
    settings = load_config(write(tmp_path, text)).create_network_dataset
    assert settings.model_path == Path("out/models") and settings.networks == ["resnet18"]
    assert settings.num_classes == 10


def _fingerprint(tmp_path: Path, report: str) -> str:
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "specs").mkdir(exist_ok=True)
    (tmp_path / "logs" / "resnet18_0-gt.csv").write_text("passed|bs|model|mem_used\n")
    (tmp_path / "specs" / "resnet18_0.json").write_text("{}")
    return (f"[fingerprint]\ntrain_nets = ['resnet18']\ntrain_logs = [0]\nmemory_logs = ['{tmp_path / 'logs'}']\n"
            f"pruned_models_storedir = {tmp_path / 'specs'}\nmodel_storedir = {tmp_path / 'fitted'}\n"
            f"report = {report}\n")


@pytest.mark.parametrize(("report", "written", "input_"), [
    ("config.ini", "config.ini", "the config file"),
    ("config.json", "config.png", None),  # its plot
    ("logs/resnet18_0-gt.csv", "logs/resnet18_0-gt.csv", "read from [fingerprint] memory_logs"),
    ("specs/resnet18_0.json", "specs/resnet18_0.json", "read from [fingerprint] pruned_models_storedir"),
    ("specs/../logs/./resnet18_0-gt.csv", "specs/../logs/./resnet18_0-gt.csv", "read from [fingerprint] memory_logs"),
])
def test_an_output_that_is_an_input_of_the_run_is_refused_naming_both(tmp_path: Path, report: str, written: str,
                                                                      input_: str | None) -> None:
    path = tmp_path / "config.ini"
    if written == "config.png":  # the config is config.png: the report config.json would plot over it
        path = tmp_path / "config.png"
    path.write_text(_fingerprint(tmp_path, str(tmp_path / report)))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(Exception, match=re.escape(f"[fingerprint] report: {tmp_path / written} would be written over "
                                                  f"an input of this run, {(tmp_path / written).resolve()} (")
                       + re.escape(input_ or "the config file")):
        load_config(path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_test_config_written_over_its_own_config_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, f"[profile]\nnetwork = ['resnet18']\nlocal_model_loc = {tmp_path}\n"
                           f"test_config = {tmp_path / 'config.ini'}\n")
    assert main(["run", "--config", str(path)]) == 2
    path = write(tmp_path, _fingerprint(tmp_path, str(tmp_path / "report.json")))
    assert load_config(path).fingerprint.report == tmp_path / "report.json"


def test_an_output_beside_the_inputs_that_is_none_of_them_is_written_again(tmp_path: Path) -> None:
    """A report or test config kept in the folder of the specs or logs it reads (from a run
    before) is no input: only `<net>_<level>` specs, model files and logs, and environment records are."""
    (tmp_path / "specs").mkdir()
    for name in ("report.json", "report_predictions.csv", "test_config.ini", "notes.py"):
        (tmp_path / "specs" / name).write_text("x")
    config = write(tmp_path, _fingerprint(tmp_path, str(tmp_path / "specs" / "report.json")))
    assert load_config(config).fingerprint.report == tmp_path / "specs" / "report.json"
    config.write_text(f"[profile]\nnetwork = ['resnet18']\nlocal_model_loc = {tmp_path / 'specs'}\n"
                      f"test_config = {tmp_path / 'specs' / 'test_config.ini'}\n")
    assert load_config(config).profile.test_config == tmp_path / "specs" / "test_config.ini"
    (tmp_path / "logs" / "environment-20260101T000000Z.json").write_text("{}")
    config.write_text(_fingerprint(tmp_path, str(tmp_path / "logs" / "environment-20260101T000000Z.json")))
    with pytest.raises(Exception, match="would be written over an input of this run"):
        load_config(config)
