"""`perf4sight prune`, driven in-process."""

from __future__ import annotations

import pandas as pd
import pytest

from perf4sight.cli import main
from perf4sight.cli.prune import parse_input_size, parse_levels
from perf4sight.errors import ConfigError


def test_prune_writes_specs_and_manifest(tmp_path, capsys):
    out = tmp_path / "models"
    code = main(["-q", "prune", "--net", "resnet18,mobilenetv2", "--levels", "0:40:20", "--input-size", "3,32,32",
                 "--num-classes", "10", "--seed", "4", "--out", str(out)])
    assert code == 0
    manifest = pd.read_csv(out / "manifest.csv")
    assert list(manifest["name"]) == [f"{n}_{lv}" for n in ("resnet18", "mobilenetv2") for lv in (0, 20, 40)]
    assert sorted(p.name for p in out.glob("*.json")) == sorted(f"{n}.json" for n in manifest["name"])
    assert "mobilenetv2_40" in capsys.readouterr().out  # the table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--net", "resnet18", "--levels", "96"], "level 96 is outside"),
        (["--net", "resnet19"], "unknown network 'resnet19'"),
        (["--net", "resnet18", "--levels", "ten"], "--levels 'ten'"),
        (["--net", "resnet18", "--input-size", "3,32"], "--input-size '3,32'"),
        (["--net", "resnet18", "--mode", "magnitude"], "unknown pruning mode 'magnitude'"),
        (["--net", "resnet18", "--levels", "90:0:10"], "--levels 90:0:10: the range runs downward"),
        (["--net", "resnet18", "--seed", "-1"], "[create_network_dataset] seed: pruning seed -1 is not an integer in [0, 4294967295]"),
        (["--net", "resnet18", "--seed", "99999999999999999999"], "seed: pruning seed 99999999999999999999 is not an integer"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    assert main(["prune", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_level_and_size_parsing():
    assert parse_levels("0:90:10") == list(range(0, 91, 10))
    assert parse_levels("5, 15,25") == [5, 15, 25]
    assert parse_input_size("3x64x64") == [3, 64, 64]
    assert parse_levels("40:40:10") == [40]
    with pytest.raises(ConfigError):
        parse_levels("0:90:0")
    with pytest.raises(ConfigError, match="did you mean 0:90:10"):
        parse_levels("90:0:10")
    with pytest.raises(ConfigError, match=r"^--levels 0:100:50: pruning level 100 is outside \[0, 95\]"):
        parse_levels("0:100:50")  # refused before any level is pruned or predicted


def test_a_folder_blocked_by_a_file_is_one_line(tmp_path, capsys):
    blocked = tmp_path / "afile"
    blocked.write_text("")
    assert main(["prune", "--net", "squeezenet", "--levels", "0", "--input-size", "3,32,32", "--out", str(blocked)]) == 2
    err = capsys.readouterr().err
    assert str(blocked) in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_missing_model_desc_dir_is_refused(tmp_path, capsys):
    assert main(["prune", "--net", "tinynet", "--model-desc-dir", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert f"model_desc_dir: directory not found: {tmp_path / 'none'}" in capsys.readouterr().err


def test_a_second_prune_into_a_folder_in_use_is_one_line_and_writes_nothing(tmp_path, capsys):
    import os

    from perf4sight.device.lock import FolderLock

    out = tmp_path / "models"
    argv = ["-q", "prune", "--net", "squeezenet1_1", "--levels", "0", "--input-size", "3,32,32", "--out", str(out)]
    with FolderLock(out, "prune.lock", "held by {pid}"):  # as another prune's, writing now
        capsys.readouterr()
        assert main(argv) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: {out}: another prune (pid {os.getpid()}) is writing specs into this folder; wait for it to "
            "end or give another folder"]
        assert sorted(p.name for p in out.iterdir()) == ["prune.lock"]
    assert main(argv) == 0 and (out / "squeezenet1_1_0.json").is_file()
