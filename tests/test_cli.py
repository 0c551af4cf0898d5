"""The command line's own errors: a mistyped option or command is one message, never a traceback;
a wrong option (a bad combination or value, or one given twice) is one line and exit code 2,
answered before torch, scikit-learn or pandas is imported."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perf4sight.cli import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["profile", "--config", "config.ini"], "No such option: --config"),
        (["fingerprint"], "Missing option '--config'"),
        (["nope"], "No such command 'nope'"),
    ],
)
def test_usage_errors_exit_2_with_a_message(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# --- cheap validation first: the real console script, in a fresh process -----------------

PERF4SIGHT = Path(sys.executable).with_name("perf4sight")
HEAVY = ("torch", "sklearn", "pandas")


@pytest.fixture(scope="module")
def no_heavy_packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which importing torch, scikit-learn or pandas fails loudly (a
    traceback, exit code 1): a command that loads one before checking its options cannot
    answer with one line and exit code 2."""
    shadow = tmp_path_factory.mktemp("no_heavy_packages")
    for name in HEAVY:
        (shadow / f"{name}.py").write_text(f"raise RuntimeError('{name} imported before the options were checked')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PERF4SIGHT), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_importing_the_cli_loads_no_heavy_package() -> None:
    probe = "import sys, perf4sight.cli; print('torch' in sys.modules, [m for m in {!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe.format(HEAVY)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "[]"]


_MODELS = ["--models", "fitted", "--net", "resnet18"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        # flag combinations
        (["predict", *_MODELS, "--bs", "8", "--max-batch-size"], "--max-batch-size"),
        (["predict", *_MODELS, "--bs", "8", "--max-batch-size", "--budget", "1GiB"], "--bs and --max-batch-size"),
        (["predict", *_MODELS, "--budget", "1GiB"], "--budget"),
        (["predict", *_MODELS, "--bound"], "--bound"),
        # values
        (["predict", *_MODELS, "--bs", "0"], "--bs"),
        (["predict", *_MODELS, "--stage", "nope"], "stage: 'nope'"),
        (["predict", *_MODELS, "--optimizer", "nope"], "'nope'"),
        (["predict", *_MODELS, "--checkpoint-segments", "x"], "--checkpoint-segments"),
        (["predict", *_MODELS, "--dataset-size", "0"], "dataset size 0"),
        (["predict", *_MODELS, "--input-size", "3,99999,9"], "input size"),
        (["predict", *_MODELS, "--num-classes", "0"], "num_classes 0"),
        (["predict", *_MODELS, "--max-batch-size", "--budget", "lots"], "'lots'"),
        (["plan", *_MODELS, "--budget", "1GiB", "--levels", "99"], "--levels 99"),
        (["plan", *_MODELS, "--budget", "1GiB", "--mode", "nope"], "'nope'"),
        (["plan", *_MODELS, "--budget", "1GiB", "--max-latency", "soon"], "'soon'"),
        (["prune", "--net", "resnet18", "--levels", "0:99:10"], "--levels 0:99:10"),
        (["prune", "--net", "resnet18", "--mode", "nope"], "mode"),
        (["prune", "--net", "resnet18", "--input-size", "3,64"], "--input-size"),
        (["fingerprint", "--config", "missing.ini"], "missing.ini"),
        (["profile", "run", "--config", "missing.ini"], "missing.ini"),
        (["profile", "create-config", "--config", "missing.ini"], "missing.ini"),
        (["profile", "bundle", "--config", "missing.ini", "--out", "bundle"], "missing.ini"),
        (["run", "--config", "missing.ini"], "missing.ini"),
        # a flag given twice
        (["predict", *_MODELS, "--bs", "8", "--bs", "2"], "--bs is given twice"),
        (["predict", "--models", "fitted", "--net", "a", "--net", "b"], "--net is given twice"),
        (["predict", *_MODELS, "--json", "--json"], "--json is given twice"),
        (["plan", *_MODELS, "--budget", "1GiB", "--budget", "2GiB", "--budget", "3GiB"], "--budget is given 3 times"),
        (["prune", "--net", "resnet18", "-l", "10", "--levels", "20"], "--levels is given twice"),
        (["profile", "run", "-c", "a.ini", "--config", "b.ini"], "--config is given twice"),
        (["fingerprint", "--config", "a.ini", "--config", "b.ini"], "--config is given twice"),
        (["run", "--config", "a.ini", "-c", "b.ini"], "--config is given twice"),
        (["--quiet", "-q", "run", "--config", "a.ini"], "--quiet is given twice"),
    ],
)
def test_a_bad_option_is_one_line_before_any_heavy_import(
    args: list[str], named: str, no_heavy_packages: dict[str, str], tmp_path: Path
) -> None:
    done = _run(args, no_heavy_packages, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], done.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_list_option_may_be_repeated(no_heavy_packages: dict[str, str], tmp_path: Path) -> None:
    """`prune --net` is documented as repeatable: repeated, it is no error (the levels are)."""
    done = _run(["prune", "--net", "resnet18", "-n", "squeezenet", "--levels", "99"], no_heavy_packages, tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --levels 99: pruning level 99 is outside [0, 95] (percent of parameters removed)"
    ]


def test_help_loads_no_heavy_package(no_heavy_packages: dict[str, str], tmp_path: Path) -> None:
    done = _run(["--help"], no_heavy_packages, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "predict" in done.stdout


@pytest.mark.parametrize("command", ["info", "clear"])
def test_the_cache_commands_load_no_heavy_package(command: str, no_heavy_packages: dict[str, str],
                                                  tmp_path: Path) -> None:
    done = _run(["cache", command], {**no_heavy_packages, "PERF4SIGHT_CACHE_DIR": str(tmp_path / "cache")}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(tmp_path / "cache") in done.stdout


def test_a_repeated_option_is_refused_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    """The library entry (`main`, as `python main.py` calls it) refuses it too, before the command runs."""
    assert main(["predict", "--models", "m", "--net", "a", "--stage", "training", "--stage", "inference"]) == 2
    assert capsys.readouterr().err.strip() == "error: --stage is given twice; give it once"
