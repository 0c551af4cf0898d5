"""Latency in passes (`[profile] latency_passes`): real campaigns of small model files on the
CPU, each latency test run once per pass and merged into the one row per test the fit reads."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from perf4sight.cli import main
from perf4sight.config import ProfileSettings
from perf4sight.device.logs import latest_rows
from perf4sight.errors import ArgumentError
from perf4sight.fit.logs import read_gt_log
from perf4sight.device.definitions import LATENCY
from perf4sight.profile import profile_from_settings, read_journal
from perf4sight.profile.campaign import check_settings
from perf4sight.profile.passes import PASSES_FOLDER, merge_passes, pass_order


def _settings(tmp_path: Path, model_dir: Path, passes: int, **changes) -> ProfileSettings:
    return ProfileSettings(network=["tinynet", "fragile"], bs=[2, 16], dataset="cifar10", local_model_loc=model_dir,
                           test_config=tmp_path / "t.ini", log_dir=tmp_path / "logs", iterations=2, warmup=0,
                           latency_passes=passes, **changes)


def _gt(log_dir: Path, model: str) -> pd.DataFrame:
    return pd.read_csv(log_dir / "latency" / f"{model}-gt.csv", sep="|").set_index("bs")


def _pass_gt(log_dir: Path, number: int, model: str) -> pd.DataFrame:
    return _gt(log_dir / PASSES_FOLDER / f"pass-{number}", model)


def _times(cell: str) -> list[float]:
    return ast.literal_eval(cell)


@pytest.mark.slow
def test_each_latency_test_is_the_mean_of_its_passes_and_a_second_run_runs_nothing(
        tmp_path: Path, model_dir: Path) -> None:
    models = ["tinynet_0", "fragile_0"]
    level_0 = tmp_path / "level_0"
    level_0.mkdir()
    for model in models:
        (level_0 / f"{model}.py").write_text((model_dir / f"{model}.py").read_text())
    settings = _settings(tmp_path, level_0, 2)
    summary = profile_from_settings(settings)
    log_dir = settings.log_dir
    memory_runs = [r for r in summary.results if r.test.test_var == "memory"]
    latency_runs = [r for r in summary.results if r.test.test_var == "latency"]
    assert len(memory_runs) == 4 and len(latency_runs) == 2 * 4  # memory once, latency once per pass
    assert not (log_dir / PASSES_FOLDER / "pass-0" / "memory").exists()
    # pass 1 visits the models in the other order
    first, second = ([r.test.log_name for r in latency_runs[n * 4:(n + 1) * 4:2]] for n in (0, 1))
    assert first == models and second == models[::-1]
    for model in models:
        merged = _gt(log_dir, model)
        one, two = _pass_gt(log_dir, 0, model), _pass_gt(log_dir, 1, model)
        assert list(merged.columns) == list(one.columns) and list(merged.index) == [2, 16]
        for bs in (2, 16):
            if model.startswith("fragile") and bs == 16:  # raises from 16 on: a failure in each pass
                assert not merged.loc[bs, "passed"] and "simulated" in merged.loc[bs, "error"]
                continue
            times = _times(merged.loc[bs, "latency_iters_ms"])
            assert times == _times(one.loc[bs, "latency_iters_ms"]) + _times(two.loc[bs, "latency_iters_ms"])
            assert merged.loc[bs, "latency"] == pytest.approx(sum(times) / 4)
            assert merged.loc[bs, "test_s"] == pytest.approx(one.loc[bs, "test_s"] + two.loc[bs, "test_s"], abs=0.02)
    # the journal the fit reads: one row per test; the fit's reader takes it
    rows = read_journal(log_dir / "latency" / "tinynet_0.csv")
    assert len(rows) == len(latest_rows(rows)) == 2
    assert len(read_gt_log(log_dir / "latency" / "tinynet_0-gt.csv", [LATENCY])) == 2
    assert list(log_dir.glob("environment-*.json"))

    again = profile_from_settings(settings)
    assert again.results == [] and again.already_recorded == 4 + 2 * 4


@pytest.mark.slow
def test_latency_of_one_pass_becomes_the_first_of_several(tmp_path: Path, model_dir: Path) -> None:
    settings = dataclasses.replace(_settings(tmp_path, model_dir, 1), network=["tinynet"], bs=[2],
                                   profile_variables=["latency"])
    profile_from_settings(settings)
    before = _times(_gt(settings.log_dir, "tinynet_0").loc[2, "latency_iters_ms"])
    summary = profile_from_settings(dataclasses.replace(settings, latency_passes=3))
    assert summary.already_recorded == 2 and len(summary.results) == 2 * 2  # passes 2 and 3 ran
    assert _times(_pass_gt(settings.log_dir, 0, "tinynet_0").loc[2, "latency_iters_ms"]) == before
    merged = _times(_gt(settings.log_dir, "tinynet_0").loc[2, "latency_iters_ms"])
    assert len(merged) == 3 * 2 and merged[:2] == before


def test_a_merge_interrupted_before_it_took_the_old_folders_place_is_made_again(tmp_path: Path) -> None:
    """The merge writes aside and swaps: a folder left aside by a killed merge is replaced."""
    log_dir = tmp_path / "logs"
    stale = log_dir / "latency.merging"
    stale.mkdir(parents=True)
    (stale / "junk_0.csv").write_text("not a journal\n")
    made = merge_passes([], log_dir)
    assert made == log_dir / "latency" and list(made.iterdir()) == [] and not stale.exists()


@pytest.mark.parametrize(("passes", "save", "message"), [
    (0, True, "latency_passes: expected a positive integer, got 0"),
    (2.5, True, "latency_passes: expected a positive integer, got 2.5"),
    (True, True, "latency_passes: expected a positive integer, got True"),
    (2, False, "latency_passes = 2: passes are merged from their logs; needs save = true"),
])
def test_passes_no_run_can_make_are_refused_before_anything_runs(
        tmp_path: Path, model_dir: Path, passes: object, save: bool, message: str) -> None:
    settings = _settings(tmp_path, model_dir, 1, save=save)
    with pytest.raises(ArgumentError, match=message):
        check_settings(dataclasses.replace(settings, latency_passes=passes))


def test_the_models_order_differs_from_pass_to_pass() -> None:
    models = [f"net_{n}" for n in range(6)]
    orders = [pass_order(models, number) for number in range(4)]
    assert orders[0] == models and orders[1] == models[::-1]
    assert all(sorted(order) == models for order in orders) and len({tuple(order) for order in orders}) == 4
    assert pass_order(models, 2) == pass_order(models, 2)  # the same pass, the same order: a resumed pass


def test_a_bundle_of_several_passes_is_one_line_and_writes_nothing(
        tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\nnetwork = ['tinynet']\nbs = [2]\ndataset = cifar10\nlocal_model_loc = {model_dir}\n"
                      f"log_dir = {tmp_path / 'logs'}\nlatency_passes = 3\n")
    assert main(["profile", "bundle", "--config", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {config}: [profile] latency_passes = 3: a bundle runs each latency test once; set 1 "
                   "(passes are for `perf4sight profile run` on the device itself)")
    assert not (tmp_path / "out").exists()
