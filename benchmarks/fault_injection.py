"""Fault injection: hostile and broken inputs fed to the `perf4sight` command, each case
classified by what the user sees.

    .venv/bin/python benchmarks/fault_injection.py [--only config,spec] [--list]

Categories: config files (every key of every section given values that are wrong, out of
range, hostile or huge, and broken files), command-line options, profiling-log rows (also
rows that disagree with their file, figures that are no decimal number within a device's
reach, a header naming a column twice), the set of logs a fit reads (a folder listed twice
or through a link, levels without a log, an evaluation on the training runs, a comment after
a value), tampered stored models, impossible architecture specs and specs that disagree with
their logs, outputs that would replace an input of the run, `prune` run again into a folder
with other settings, network names that are paths, temporary files left by a killed writer,
`prune` killed part-way (then run again), bundles broken, moved or sent to another bundle's
logs on the device (their runner run as there, without perf4sight), and model folders written
by two fingerprints at once or by one killed part-way (then `predict` on them). Stored models, specs and logs start from the
H200 measurements in the repository (squeezenet at levels 0, 60 and 90) or, for the cases of
logs, specs and outputs against each other, from the CPU zoo's (`benchmarks/data/cpu_zoo`).
Each case runs in this process through `perf4sight.cli.main` (kills and bundles: in a child
process), and is counted as

- one line: exit code 2 and one line on stderr (at most 4096 characters), as asked;
- right: a case with a right answer (a config with a byte order mark is read, a repeated
  network is pruned once, a log with repeats is fitted with a warning) gave it;
- traceback: an exception escaped the command;
- silent: exit 0 where an error was due, or a wrong answer;
- lost: after a kill, the manifest and the specs disagree; after a rerun, temporaries remain;
- executed: code from the input ran (every hostile payload would create a marker file);
- other: any other exit code or a message of several lines.

Prints one row per category and the totals; `--list` prints every case's outcome.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
import traceback
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf4sight.device.definitions import LATENCY, MEMORY

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "h200"
LEVELS = (0, 60, 90)  # the squeezenet levels fitted; a log or spec case changes the middle one's
CHANGED = LEVELS[1]
OUTCOMES = ("one line", "right", "traceback", "silent", "lost", "executed", "other")
MAX_LINE = 4096
DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "99999999999999999999999"
# The stored models (`<stage>_<target>` .skops and .json) that the stored-model cases break.
MEMORY_MODEL = f"training_{MEMORY.name}"
LATENCY_MODEL = f"training_{LATENCY.name}"


@dataclass
class Fixtures:
    """What the cases share: a scratch root, the marker a hostile payload would create,
    the measurements the cases start from and fitted models made from them once."""

    root: Path
    data: Path = DATA
    _models: Path | None = None
    _other_models: Path | None = None
    _bundle: Path | None = None

    @property
    def marker(self) -> Path:
        return self.root / "EXECUTED"

    def models(self) -> Path:
        """A folder of fitted memory and latency models ('physical', squeezenet at LEVELS)."""
        if self._models is None:
            self._models = self._fit("_fitted")
        return self._models

    def other_models(self) -> Path:
        """Models fitted like `models` on two levels only (0 and 90): another set."""
        if self._other_models is None:
            self._other_models = self._fit("_fitted_other", train_logs="[0, 90]")
        return self._other_models

    def _fit(self, name: str, **changes: str) -> Path:
        folder = self.root / name
        config = self.root / f"{name}.ini"
        config.write_text(_section("fingerprint", {**_fingerprint_base(self, folder), **changes}))
        code, _, err, exc = invoke(["fingerprint", "--config", str(config)])
        if code != 0:
            raise RuntimeError(f"fitting the models of {name} failed: {err or exc}")
        return folder

    def bundle(self) -> Path:
        """A bundle of squeezenet1_1 at 3x32x32 (batch sizes 2 and 4, training, both variables),
        and its logs after one run (`<bundle>/logs`)."""
        if self._bundle is None:
            from perf4sight.networks import spec_from_module, write_spec
            import torchvision

            specs = self.root / "_bundle_specs"
            write_spec(spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name="squeezenet_0",
                                        net="squeezenet", prune_level=0, input_size=(3, 32, 32), num_classes=10,
                                        torchvision_name="squeezenet1_1"), specs / "squeezenet_0.json")
            config = self.root / "_bundle.ini"
            config.write_text(_section("profile", {
                "network": "['squeezenet']", "bs": "[2, 4]", "stage": "['training']", "local_model_loc": str(specs),
                "test_config": str(self.root / "_unused.ini"), "log_dir": str(self.root / "_unused"),
                "device": "cpu", "iterations": "1", "warmup": "0"}))
            bundle = self.root / "_bundle"
            code, _, err, exc = invoke(["profile", "bundle", "--config", str(config), "--out", str(bundle)])
            ran = _run_bundle([str(bundle)])
            if code != 0 or ran[0] != 0:
                raise RuntimeError(f"making or running the bundle failed: {err or exc or ran[2]}")
            self._bundle = bundle
        return self._bundle


@dataclass(frozen=True)
class Case:
    """One input: `setup(scratch, fixtures)` writes its files and returns the command's
    arguments; `check(scratch, stdout, stderr)` says whether an expected answer is right."""

    category: str
    name: str
    setup: Callable[[Path, Fixtures], list[str]]
    check: Callable[[Path, str, str], bool] | None = None  # None: an error is expected
    slow: bool = False
    # how the arguments run: None, the CLI in this process (`invoke`); else another command's
    # (exit code, stdout, stderr, traceback)
    run: Callable[[list[str]], tuple[int | None, str, str, str]] | None = None

    @property
    def id(self) -> str:
        return f"{self.category}: {self.name}"


@dataclass
class Result:
    case: Case
    outcome: str
    detail: str = ""
    seconds: float = 0.0


def invoke(argv: list[str]) -> tuple[int | None, str, str, str]:
    """Run the CLI in this process, as a fresh command (no warning shown yet): (exit code,
    stdout, stderr, traceback or '')."""
    from perf4sight import console
    from perf4sight.cli import main

    console.reset()

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["--quiet", *argv])
        except BaseException:  # noqa: BLE001 - whatever escapes is what is counted
            return None, out.getvalue(), err.getvalue(), traceback.format_exc()
    return code, out.getvalue(), err.getvalue(), ""


def classify(case: Case, scratch: Path, fixtures: Fixtures) -> Result:
    """Run one case in `scratch` and say what the user saw."""
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    argv = case.setup(scratch, fixtures)
    if case.category == "kill":
        outcome, detail = _kill_outcome(argv)
        return Result(case, "executed" if fixtures.marker.exists() else outcome, detail, time.perf_counter() - start)
    code, out, err, exc = (case.run or invoke)(argv)
    seconds = time.perf_counter() - start
    lines = [line for line in err.splitlines() if line.strip()]
    if fixtures.marker.exists():
        fixtures.marker.unlink()
        return Result(case, "executed", "", seconds)
    if exc or "Traceback (most recent call last)" in err:
        return Result(case, "traceback", (exc or err).strip().splitlines()[-1], seconds)
    if case.check is not None:
        right = code == 0 and case.check(scratch, out, err)
        return Result(case, "right" if right else "silent", f"exit {code}: {' | '.join(lines)[:300]}", seconds)
    if code == 2 and len(lines) == 1 and len(lines[0]) <= MAX_LINE:
        return Result(case, "one line", lines[0][:300], seconds)
    if code == 0:
        return Result(case, "silent", "exit 0", seconds)
    return Result(case, "other", f"exit {code}, {len(lines)} lines: {' | '.join(lines)[:300]}", seconds)


# ---------------------------------------------------------------- config files

def _section(name: str, values: dict[str, str]) -> str:
    return f"[{name}]\n" + "".join(f"{key} = {value}\n" for key, value in values.items())


def _network_base(scratch: Path, fixtures: Fixtures) -> dict[str, str]:
    return {"networks": "['squeezenet1_1']", "pruning_perc": "[0]", "input_size": "[3, 32, 32]",
            "num_classes": "10", "model_path": str(scratch / "models")}


def _profile_base(scratch: Path, fixtures: Fixtures) -> dict[str, str]:
    models = scratch / "specs"
    models.mkdir(exist_ok=True)
    return {"network": "['squeezenet1_1']", "bs": "[1]", "stage": "['training']", "profile_variables": "['latency']",
            "local_model_loc": str(models), "log_dir": str(scratch / "logs"), "test_config": str(scratch / "tc.ini"),
            "iterations": "1", "warmup": "0", "device": "cpu"}


def _fingerprint_base(fixtures: Fixtures, storedir: Path) -> dict[str, str]:
    data = fixtures.data
    return {"train_nets": "['squeezenet']", "train_logs": str(list(LEVELS)), "pruned_models_storedir": str(data / "models"),
            "model_storedir": str(storedir), "memory_logs": f"['{data / 'memory'}']",
            "latency_logs": f"['{data / 'latency'}']", "method": "physical"}


_BASES: dict[str, Callable[[Path, Fixtures], dict[str, str]]] = {
    "create_network_dataset": _network_base,
    "profile": _profile_base,
    "fingerprint": lambda scratch, fixtures: _fingerprint_base(fixtures, scratch / "fitted"),
}

# (section, key, value): each a value the section must refuse. "{mark}" is the marker file,
# "{file}" an existing file, "{folder}" an existing folder, "{missing}" a path that is not there.
BAD_VALUES: list[tuple[str, str, str]] = [
    *(("create_network_dataset", "networks", v) for v in (
        "__import__('os').system('touch {mark}')", "['bogus_net']", "[1, 2]", "[]", "['list_models']",
        "['__loader__']", "['{missing}.py']", "['{missing}.json']", "['squeezenet1_1', 'bogus']", DEEP,
        "['unterminated", "{'a': 1}", "[None]", "['fasterrcnn_resnet50_fpn']", "['get_model']")),
    *(("create_network_dataset", "pruning_perc", v) for v in (
        "[-1]", "[101]", "['a']", "[1.5]", "[1e999]", f"[{HUGE}]", "[]", "[None]", "[True]", DEEP)),
    *(("create_network_dataset", "num_classes", v) for v in (
        "0", "-1", "99999999999999999999", "10000001", "1e9", "abc", "nan", "inf", "1.5", "[10]", "True", "²")),
    *(("create_network_dataset", "input_size", v) for v in (
        "[3, 0, 0]", "[3, 100000, 100000]", "[3, 224]", "abc", "[3, -1, 5]", "[3.5, 32, 32]", f"[3, {HUGE}, 32]",
        "[3, 32, 32, 32]")),
    *(("create_network_dataset", "mode", v) for v in ("bogus", "[1]")),
    *(("create_network_dataset", "seed", v) for v in ("abc", "-1", "1.5", HUGE)),
    *(("create_network_dataset", "model_path", v) for v in ("{file}", "{file}/sub")),
    *(("create_network_dataset", "model_desc_dir", v) for v in ("{missing}", "{file}")),
    *(("create_network_dataset", "write_model_files", v) for v in ("maybe", "2")),
    ("create_network_dataset", "bogus_key", "1"),
    ("create_network_dataset", "k" * 10_000, "1"),
    *(("profile", "bs", v) for v in (
        "[0]", f"[{HUGE}]", "[1048577]", "['a']", "[1.5]", "[]", "[-4]", "[float('nan')]", DEEP)),
    *(("profile", "stage", v) for v in ("['bogus']", "[]")),
    *(("profile", "profile_variables", v) for v in ("['bogus']", "[]")),
    *(("profile", "iterations", v) for v in ("0", "-1", "abc")),
    *(("profile", "warmup", v) for v in ("-1", "abc")),
    *(("profile", "gpu_id", v) for v in ("abc",)),
    *(("profile", "log_dir", v) for v in ("{file}",)),
    *(("profile", "test_config", v) for v in ("{folder}",)),
    *(("profile", "memory_limit_mib", v) for v in ("-5", "abc")),
    *(("profile", "device", v) for v in ("bogus",)),
    *(("profile", "till_first_fail", v) for v in ("maybe",)),
    *(("profile", "dataset", v) for v in ("bogus",)),
    *(("profile", "budget_minutes", v) for v in ("0", "-1", "abc", "1e9", "nan")),
    *(("profile", "network", v) for v in ("['bogus_net']", "['../../etc/passwd']")),
    *(("profile", "devices", v) for v in ("[]", "['cpu a']", "['cpu_a:3-1']", "['cpu_a', 'cpu_a:0']", "[1.5]")),
    *(("profile", "cluster", v) for v in ("' '", "127.0.0.1:1")),
    *(("fingerprint", "train_nets", v) for v in ("[]", "['bogus']", "[1]")),
    *(("fingerprint", "train_logs", v) for v in ("['x']", "[]")),
    *(("fingerprint", "pruned_models_storedir", v) for v in ("{missing}",)),
    *(("fingerprint", "model_storedir", v) for v in ("{file}",)),
    *(("fingerprint", "report", v) for v in ("{folder}", "{file}/report.json")),
    *(("fingerprint", "method", v) for v in ("bogus", "__import__('os').system('touch {mark}')")),
    *(("fingerprint", "stage", v) for v in ("bogus",)),
    *(("fingerprint", "eval_nets", v) for v in ("['bogus']",)),
    *(("fingerprint", "eval_logs", v) for v in ("['x']",)),
    *(("fingerprint", "memory_logs", v) for v in ("['{missing}']",)),
    *(("fingerprint", "evaluate", v) for v in ("maybe",)),
]
# Keys that need another key set for their value to matter.
_WITH = {("fingerprint", "eval_nets"): {"eval_logs": "[0]"}, ("profile", "devices"): {"cluster": "auto"},
         ("profile", "cluster"): {"devices": "['cpu_a']", "create_config": "false"}}


def _placeholders(value: str, scratch: Path, fixtures: Fixtures) -> str:
    (scratch / "a_file").write_text("x")
    (scratch / "a_folder").mkdir(exist_ok=True)
    return (value.replace("{mark}", str(fixtures.marker)).replace("{file}", str(scratch / "a_file"))
            .replace("{folder}", str(scratch / "a_folder")).replace("{missing}", str(scratch / "missing")))


def _config_case(section: str, key: str, value: str) -> Case:
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        values = _BASES[section](scratch, fixtures)
        values.update(_WITH.get((section, key), {}))
        values[key] = _placeholders(value, scratch, fixtures)
        path = scratch / "config.ini"
        path.write_text(_section(section, values))
        return ["run", "--config", str(path)]

    shown = value if len(value) <= 40 else f"{value[:20]}... ({len(value)} characters)"
    return Case("config", f"[{section}] {key[:20]} = {shown}", setup)


def _file_case(name: str, content: bytes | None, check: Callable[[Path, str, str], bool] | None = None) -> Case:
    """A config file with `content` (None: a folder) given to `run`."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        path = scratch / "config.ini"
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content.replace(b"{models}", str(scratch / "models").encode()))
        return ["run", "--config", str(path)]

    return Case("config", name, setup, check)


_PRUNE = b"[create_network_dataset]\nnetworks = ['squeezenet1_1']\ninput_size = [3, 32, 32]\nmodel_path = {models}\n"


def _pruned_once(scratch: Path, out: str, err: str) -> bool:
    manifest = (scratch / "models" / "manifest.csv").read_text().splitlines()
    return len(manifest) == 2  # the header and one row


FILE_CASES = [
    _file_case("the config is a folder", None),
    _file_case("no sections", b"networks = ['x']\n"),
    _file_case("empty file", b""),
    _file_case("unknown section", b"[bogus]\nx = 1\n"),
    _file_case("binary bytes", bytes(range(256))),
    _file_case("Latin-1 text", "[create_network_dataset]\nnetworks = ['r\u00e9seau']\n".encode("latin-1")),
    _file_case("duplicate section", _PRUNE + _PRUNE),
    _file_case("duplicate key", _PRUNE + b"input_size = [3, 64, 64]\n"),
    _file_case("key without value", b"[create_network_dataset]\nnetworks\n"),
    _file_case("NUL bytes", b"[create_network_dataset]\nnetworks = ['squeeze\x00net']\n"),
    _file_case("1 MB value", b"[create_network_dataset]\nnetworks = " + b"x" * 1_000_000 + b"\n"),
    _file_case("missing required key", b"[fingerprint]\ntrain_nets = ['x']\n"),
    _file_case("byte order mark", b"\xef\xbb\xbf" + _PRUNE, _pruned_once),
    _file_case("CRLF line ends", _PRUNE.replace(b"\n", b"\r\n"), _pruned_once),
    _file_case("a network listed twice", _PRUNE.replace(b"['squeezenet1_1']", b"['squeezenet1_1', 'squeezenet1_1']")
               + b"pruning_perc = [30, 30]\n", _pruned_once),
]


def _missing_config(scratch: Path, fixtures: Fixtures) -> list[str]:
    return ["run", "--config", str(scratch / "absent.ini")]


# ---------------------------------------------------------------- command-line options

def _cli_case(name: str, argv: list[str], needs_models: bool = False) -> Case:
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        (scratch / "a_file").write_text("x")
        models = str(fixtures.models()) if needs_models else str(scratch / "no-models")
        return [a.replace("{models}", models).replace("{scratch}", str(scratch)) for a in argv]

    return Case("cli", name, setup)


def _predict(*extra: str) -> list[str]:
    return ["predict", "--models", "{models}", "--net", "squeezenet1_0", *extra]


CLI_CASES = [
    *(_cli_case(f"predict --bs {v!r}", _predict("--bs", v), True) for v in (
        "0", "-1", HUGE, "1048577", "\u00b2", "1.5", "a", "", ",", "8,,16", "\u0663", "8; rm -rf /")),
    *(_cli_case(f"predict --num-classes {v}", _predict("--num-classes", v), True) for v in (
        "0", "-1", "99999999999999999999", "10000001")),
    *(_cli_case(f"predict --input-size {v!r}", _predict("--input-size", v), True) for v in (
        "3,\u00b2,4", "3,0,0", "3,99999,99999", "a", "3,224")),
    _cli_case("predict --stage bogus", _predict("--stage", "bogus"), True),
    _cli_case("predict --models missing", ["predict", "--models", "{scratch}/none", "--net", "squeezenet1_0"]),
    _cli_case("predict --models a file", ["predict", "--models", "{scratch}/a_file", "--net", "squeezenet1_0"]),
    *(_cli_case(f"predict --net {v}", ["predict", "--models", "{models}", "--net", v], True) for v in (
        "bogus", "list_models", "__loader__", "{scratch}/missing.json", "{scratch}/missing.py", "{scratch}/a_file")),
    *(_cli_case(f"predict --budget {v}", _predict("--max-batch-size", "--budget", v), True) for v in (
        "bogus", "-5GiB", "nan", "inf", "0MiB")),
    _cli_case("predict --dataset-size 0", _predict("--dataset-size", "0"), True),
    *(_cli_case(f"prune --levels {v!r}", ["prune", "--net", "squeezenet1_1", "--levels", v, "--out", "{scratch}/m"])
      for v in ("101", "-1", "90:0:10", "a", "0:100:0", "\uff11\uff10", "0:99999999999999999999:1")),
    _cli_case("prune --num-classes huge", ["prune", "--net", "squeezenet1_1", "--num-classes", "99999999999999999999",
                                           "--out", "{scratch}/m"]),
    _cli_case("prune --input-size 3,²,4", ["prune", "--net", "squeezenet1_1", "--input-size", "3,\u00b2,4",
                                           "--out", "{scratch}/m"]),
    _cli_case("prune --net bogus", ["prune", "--net", "bogus", "--out", "{scratch}/m"]),
    _cli_case("prune --out a file", ["prune", "--net", "squeezenet1_1", "--out", "{scratch}/a_file"]),
    _cli_case("fingerprint --config a folder", ["fingerprint", "--config", "{scratch}"]),
    _cli_case("plan --levels abc", ["plan", "--models", "{models}", "--net", "squeezenet1_1", "--levels", "abc",
                                    "--budget", "1GiB"], True),
]


# ---------------------------------------------------------------- profiling-log rows

def _log_case(name: str, change: Callable[[Path], None], check: Callable[[Path, str, str], bool] | None = None) -> Case:
    """The squeezenet memory logs copied, one changed by `change(path of level CHANGED)`, fitted."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        logs = scratch / "memory"
        logs.mkdir()
        for level in LEVELS:
            shutil.copy(fixtures.data / "memory" / f"squeezenet_{level}-gt.csv", logs)
        change(logs / f"squeezenet_{CHANGED}-gt.csv")
        values = _fingerprint_base(fixtures, scratch / "fitted")
        values.update(memory_logs=f"['{logs}']", latency_model="False", overwrite="True")
        path = scratch / "config.ini"
        path.write_text(_section("fingerprint", values))
        return ["fingerprint", "--config", str(path)]

    return Case("log", name, setup, check)


def _edit_field(column: str, value: str, line: int = 1) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        rows = path.read_text().splitlines()
        header = rows[0].split("|")
        fields = rows[line].split("|")
        fields[header.index(column)] = value
        rows[line] = "|".join(fields)
        path.write_text("\n".join(rows) + "\n")

    return change


def _replace_file(content: bytes | None) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        path.unlink()
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)

    return change


def _header_only(path: Path) -> None:
    path.write_text(path.read_text().splitlines()[0] + "\n")


def _doubled(path: Path) -> None:
    rows = path.read_text().splitlines()
    path.write_text("\n".join(rows + rows[1:]) + "\n")


def _warned(word: str) -> Callable[[Path, str, str], bool]:
    return lambda scratch, out, err: word in err and (scratch / "fitted" / f"{MEMORY_MODEL}.skops").is_file()


LOG_CASES = [
    *(_log_case(f"bs = {v!r}", _edit_field("bs", v)) for v in (
        "\u00b2", "0", "-1", "1.5", HUGE, "abc", "", "\u0663", "1e3", "0x10")),
    *(_log_case(f"passed = {v!r}", _edit_field("passed", v)) for v in ("maybe", "", "1")),
    *(_log_case(f"{MEMORY.column} = {v!r}", _edit_field(MEMORY.column, v)) for v in ("abc", "nan", "inf", "-5", "0")),
    _log_case("model empty", _edit_field("model", "")),
    _log_case("dataset bogus", _edit_field("dataset", "bogus")),
    _log_case("a field too many", lambda p: p.write_text(p.read_text().replace("\n", "|extra\n", 2))),
    _log_case("column missing", lambda p: p.write_text(p.read_text().replace(MEMORY.column, "mem_usd", 1))),
    _log_case("empty file", _replace_file(b"")),
    _log_case("binary file", _replace_file(bytes(range(256)) * 4)),
    _log_case("a folder in its place", _replace_file(None)),
    _log_case("formula injection in model", _edit_field("model", "=cmd|' /C calc'!A0")),
    _log_case("a header only", _header_only, _warned("no test rows")),
    _log_case("every test twice", _doubled, _warned("repeat a test")),
]


# ---------------------------------------------------------------- logs, specs and outputs against each other

ZOO = ROOT / "benchmarks" / "data" / "cpu_zoo"  # the CPU zoo's logs and specs, kept in the repository
_ZOO_LEVELS = (0, 45, 90)


def _zoo_case(category: str, name: str, change: Callable[[Path, dict[str, str]], Any],
              check: Callable[[Path, str, str], bool] | None = None, command: str = "fingerprint") -> Case:
    """The zoo's alexnet memory logs (levels 0, 45, 90) and specs copied, a memory model fitted
    on them ('physical') and evaluated on level 45, after `change(scratch, config values)` has
    edited the files or the [fingerprint] values."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        logs, specs = scratch / "memory", scratch / "specs"
        logs.mkdir()
        specs.mkdir()
        for level in _ZOO_LEVELS:
            shutil.copy(ZOO / "memory" / f"alexnet_{level}-gt.csv", logs)
            shutil.copy(ZOO / "models" / f"alexnet_{level}.json", specs)
        values = {"train_nets": "['alexnet']", "train_logs": "[0, 90]", "eval_logs": "[45]",
                  "pruned_models_storedir": str(specs), "model_storedir": str(scratch / "fitted"),
                  "memory_logs": f"['{logs}']", "latency_model": "False", "method": "physical",
                  "report": str(scratch / "report.json")}
        change(scratch, values)
        path = scratch / "config.ini"
        if not path.exists():  # a change may have written the config (or a file in its place)
            path.write_text(_section("fingerprint", values))
        return [command, "--config", str(path)]

    return Case(category, name, setup, check)


def _in_log(edit: Callable[[Path], None], level: int = 45) -> Callable[[Path, dict[str, str]], None]:
    """`edit` applied to the zoo log of alexnet at `level`, fitted on it."""
    def change(scratch: Path, values: dict[str, str]) -> None:
        edit(scratch / "memory" / f"alexnet_{level}-gt.csv")
        values["train_logs"] = "[0, 45, 90]"

    return change


def _appended_row_of(name: str) -> Callable[[Path], None]:
    """A row of another architecture's log appended, as a careless merge of two logs does."""
    return lambda path: path.write_text(path.read_text() + (ZOO / "memory" / f"{name}-gt.csv").read_text()
                                        .splitlines()[1] + "\n")


def _header_twice(column: str, instead: str) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        rows = path.read_text().splitlines()
        header = rows[0].split("|")
        header[header.index(instead)] = column
        path.write_text("\n".join(["|".join(header), *rows[1:]]) + "\n")

    return change


ROW_CASES = [
    *(_zoo_case("log", f"{column} = {value!r} in a row of alexnet_45 (memory)", _in_log(_edit_field(column, value, 2)))
      for column, value in (("net_name", "resnet18"), ("model", "benchmarks/data/cpu_zoo/models/vgg11_45.json"),
                            ("model", "alexnet_90.json"), ("test_var", "latency"), ("stage", "Training"),
                            ("stage", "TRAINING"), ("stage", "train"))),
    *(_zoo_case("log", f"a row of {name} appended", _in_log(_appended_row_of(name)))
      for name in ("vgg11_45", "alexnet_90", "resnet18_0")),
    *(_zoo_case("log", f"{MEMORY.column} = {value!r} in a passed row", _in_log(_edit_field(MEMORY.column, value, 2)))
      for value in ("0x10", "0X1F", "0b101", "0o17", "1_000", "1e300", "20000000", "inf", "-inf", "nan", "NaN",
                    "True", "1e999", "[1]", "(1)", "'12'", "1j")),
    *(_zoo_case("log", f"the header names {column} twice (instead of {instead})", _in_log(_header_twice(column, instead)))
      for column, instead in ((MEMORY.column, "mem_avail"), ("bs", "free"), ("model", "net_name"),
                              ("passed", "mem_alloc"), ("stage", "error"))),
]


def _fitted_once(word: str) -> Callable[[Path, str, str], bool]:
    """Right: `word` said in one line of stderr, and the model fitted on each training row once."""
    def check(scratch: Path, out: str, err: str) -> bool:
        from perf4sight.fit import load_model

        model = load_model(scratch / "fitted", stage="training", target=MEMORY.name)
        rows = sum(1 for level in (0, 90)
                   for line in (ZOO / "memory" / f"alexnet_{level}-gt.csv").read_text().splitlines()[1:]
                   if line.startswith("True|"))
        said = [line for line in err.splitlines() if word in line]
        return len(said) == 1 and model.n_train_ == rows

    return check


def _reported(word: str) -> Callable[[Path, str, str], bool]:
    """Right: `word` said in one line of stderr and in the report's notes, the evaluation done."""
    def check(scratch: Path, out: str, err: str) -> bool:
        notes = json.loads((scratch / "report.json").read_text())[MEMORY.name].get("notes", [])
        return len([line for line in err.splitlines() if word in line]) == 1 and any(word in n for n in notes)

    return check


def _noted(scratch: Path, out: str, err: str) -> bool:
    """Right: the evaluation on training runs said on stderr and in the report."""
    report = json.loads((scratch / "report.json").read_text())
    return "the evaluation of them is on runs the models were fitted on" in err and any("fitted on" in note for note in report[MEMORY.name]["notes"])


def _twice(scratch: Path, values: dict[str, str]) -> None:
    """The folder listed twice; fitted only (an evaluation would read its own logs twice, and say so)."""
    values.update(memory_logs=f"['{scratch / 'memory'}', '{scratch / 'memory'}']", eval_logs="[]")


def _linked(scratch: Path, values: dict[str, str]) -> None:
    (scratch / "link").symlink_to(scratch / "memory")
    values.update(memory_logs=f"['{scratch / 'memory'}', '{scratch / 'link'}']", eval_logs="[]")


def _linked_files(scratch: Path, values: dict[str, str]) -> None:
    """A second folder whose logs are links to the first's."""
    (scratch / "other").mkdir()
    for level in _ZOO_LEVELS:
        (scratch / "other" / f"alexnet_{level}-gt.csv").symlink_to(scratch / "memory" / f"alexnet_{level}-gt.csv")
    values.update(memory_logs=f"['{scratch / 'memory'}', '{scratch / 'other'}']", eval_logs="[]")


def _set_values(**changes: str) -> Callable[[Path, dict[str, str]], None]:
    def change(scratch: Path, values: dict[str, str]) -> None:
        values.update({key: value.replace("{scratch}", str(scratch)) for key, value in changes.items()})

    return change


def _stored_at(folder: str) -> Callable[[Path, str, str], bool]:
    return lambda scratch, out, err: (scratch / folder / f"{MEMORY_MODEL}.skops").is_file() and not any(
        ";" in p.name or "#" in p.name for p in scratch.iterdir())


SET_CASES = [
    _zoo_case("log set", "the log folder listed twice", _twice, _fitted_once("found again")),
    _zoo_case("log set", "the log folder listed again through a link", _linked, _fitted_once("found again")),
    _zoo_case("log set", "a second folder of links to the logs", _linked_files, _fitted_once("found again")),
    _zoo_case("log set", "the log folder listed again as folder/../folder",
              _set_values(memory_logs="['{scratch}/memory', '{scratch}/memory/../memory']", eval_logs="[]"),
              _fitted_once("found again")),
    _zoo_case("log set", "a level listed in train_logs with no log", _set_values(train_logs="[0, 60, 90]"),
              _fitted_once("no log at alexnet levels [60]")),
    _zoo_case("log set", "two levels listed in train_logs with no log", _set_values(train_logs="[0, 10, 90, 95]"),
              _fitted_once("no log at alexnet levels [10, 95]")),
    _zoo_case("log set", "a level listed in eval_logs with no log", _set_values(eval_logs="[45, 50]"),
              _reported("no log at alexnet levels [50]")),
    _zoo_case("log set", "the eval log folder listed twice",
              _set_values(eval_memory_logs="['{scratch}/memory', '{scratch}/memory']"), _reported("found again")),
    _zoo_case("log set", "eval_logs equal to train_logs", _set_values(eval_logs="[0, 90]"), _noted),
    _zoo_case("log set", "eval_logs overlapping train_logs", _set_values(eval_logs="[45, 90]"), _noted),
    _zoo_case("log set", "eval_logs equal to train_logs, eval_memory_logs the same folder by a link",
              lambda scratch, values: (_linked(scratch, values),
                                       values.update(memory_logs=f"['{scratch / 'memory'}']", eval_logs="[0, 90]",
                                                     eval_memory_logs=f"['{scratch / 'link'}']")), _noted),
    _zoo_case("log set", "a ; comment after model_storedir", _set_values(model_storedir="{scratch}/fitted ; models"),
              _stored_at("fitted")),
    _zoo_case("log set", "a # comment after model_storedir", _set_values(model_storedir="{scratch}/fitted  # models"),
              _stored_at("fitted")),
    _zoo_case("log set", "a ; comment after train_logs", _set_values(train_logs="[0, 90] ; fitted on these"),
              _stored_at("fitted")),
]


def _spec_edit(level: int, **changes: Any) -> Callable[[Path, dict[str, str]], None]:
    def change(scratch: Path, values: dict[str, str]) -> None:
        path = scratch / "specs" / f"alexnet_{level}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    return change


def _spec_of(name: str, level: int = 90) -> Callable[[Path, dict[str, str]], None]:
    """Another architecture's spec in the place of alexnet's, as a mixed-up folder holds."""
    return lambda scratch, values: shutil.copy(ZOO / "models" / f"{name}.json", scratch / "specs" / f"alexnet_{level}.json")


def _measured_then(level: int, edit: Callable[[Path, dict[str, str]], None]) -> Callable[[Path, dict[str, str]], None]:
    """The log of alexnet at `level` recording the digest of the spec it was measured as (as
    the profiler writes it), then the spec changed by `edit`."""
    def change(scratch: Path, values: dict[str, str]) -> None:
        from perf4sight.device.files import file_digest

        log = scratch / "memory" / f"alexnet_{level}-gt.csv"
        digest = file_digest(scratch / "specs" / f"alexnet_{level}.json")
        header, *rows = log.read_text().splitlines()
        log.write_text("\n".join([header + "|spec_sha256", *(row + "|" + digest for row in rows)]) + "\n")
        edit(scratch, values)

    return change


def _renamed_spec_of(source: str, level: int) -> Callable[[Path, dict[str, str]], None]:
    """`source`'s spec written in alexnet's place at `level` under that architecture's name."""
    def change(scratch: Path, values: dict[str, str]) -> None:
        spec = json.loads((ZOO / "models" / f"{source}.json").read_text())
        (scratch / "specs" / f"alexnet_{level}.json").write_text(json.dumps({**spec, "name": f"alexnet_{level}"}))

    return change


SPEC_LOG_CASES = [
    _zoo_case("spec", "written again at another level, same name, after its logs were measured (fingerprint)",
              _measured_then(90, _renamed_spec_of("alexnet_45", 90))),
    _zoo_case("spec", "written again (another pruning run) after its logs were measured (fingerprint)",
              _measured_then(45, _spec_edit(45, level_reached=44.5))),
    _zoo_case("spec", "name of another network than its logs' (fingerprint)", _spec_edit(90, name="resnet18_90")),
    _zoo_case("spec", "name of another level than its logs' (fingerprint)", _spec_edit(90, name="alexnet_45")),
    _zoo_case("spec", "net of another network than its logs' (fingerprint)", _spec_edit(0, net="vgg11")),
    _zoo_case("spec", "name with a blank after it (fingerprint)", _spec_edit(0, name="alexnet_0 ")),
    _zoo_case("spec", "vgg11_90's spec in alexnet_90's place (fingerprint)", _spec_of("vgg11_90")),
    _zoo_case("spec", "alexnet_45's spec in alexnet_90's place (fingerprint)", _spec_of("alexnet_45")),
]


def _report_at(where: str) -> Callable[[Path, dict[str, str]], None]:
    return _set_values(report=where)


def _config_named(name: str, report: str) -> Callable[[Path, dict[str, str]], None]:
    """The config written as `name`, the report at `report`: what it writes beside it falls on the config."""
    def change(scratch: Path, values: dict[str, str]) -> None:
        values["report"] = report.replace("{scratch}", str(scratch))
        (scratch / name).write_text(_section("fingerprint", values))
        (scratch / "config.ini").symlink_to(scratch / name)

    return change


def _test_config_over(target: str) -> Callable[[Path, Fixtures], list[str]]:
    """[profile] test_config naming `target` (the config itself, or a spec it reads)."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        values = _profile_base(scratch, fixtures)
        shutil.copy(ZOO / "models" / "alexnet_0.json", scratch / "specs")
        values.update(network="['alexnet']", test_config=target.replace("{scratch}", str(scratch)))
        path = scratch / "config.ini"
        path.write_text(_section("profile", values))
        return ["run", "--config", str(path)]

    return setup


def _prune_over_its_source(scratch: Path, fixtures: Fixtures) -> list[str]:
    """`prune` of a spec into its own folder at its own level: the output is the input."""
    shutil.copy(ZOO / "models" / "alexnet_0.json", scratch)
    return ["prune", "--net", str(scratch / "alexnet_0.json"), "--levels", "0", "--input-size", "3,64,64",
            "--num-classes", "10", "--out", str(scratch)]


OUTPUT_CASES = [
    _zoo_case("output", "report = the config file", _report_at("{scratch}/config.ini")),
    _zoo_case("output", "report = a log it fits", _report_at("{scratch}/memory/alexnet_0-gt.csv")),
    _zoo_case("output", "report = a log it evaluates, by ../", _report_at("{scratch}/specs/../memory/alexnet_45-gt.csv")),
    _zoo_case("output", "report = a spec", _report_at("{scratch}/specs/alexnet_90.json")),
    _zoo_case("output", "report x.json whose plot is the config x.png", _config_named("x.png", "{scratch}/x.json")),
    _zoo_case("output", "report = the config by a link", _config_named("real.ini", "{scratch}/real.ini")),
    Case("output", "[profile] test_config = the config file", _test_config_over("{scratch}/config.ini")),
    Case("output", "[profile] test_config = a spec it reads", _test_config_over("{scratch}/specs/alexnet_0.json")),
    Case("output", "prune a spec into its own folder at its own level", _prune_over_its_source),
]


def _prune_again(name: str, first: dict[str, str], second: dict[str, str],
                 check: Callable[[Path, str, str], bool] | None = None) -> Case:
    """`prune` run into a folder with `first`'s options, then again with `second`'s (each
    over the same defaults; a flag's value '' is given alone)."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        def argv(options: dict[str, str]) -> list[str]:
            given = {"--net": "squeezenet1_1", "--out": str(scratch / "models"), "--levels": "50",
                     "--input-size": "3,32,32", "--num-classes": "10", **options}
            return ["prune", *(part for flag, value in given.items() for part in ((flag, value) if value else (flag,)))]

        code, _, err, exc = invoke(argv(first))
        if code != 0:
            raise RuntimeError(f"the first prune failed: {err or exc}")
        (scratch / "first.json").write_bytes((scratch / "models" / "squeezenet1_1_50.json").read_bytes())
        return argv(second)

    return Case("prune again", name, setup, check)


def _replaced(scratch: Path, out: str, err: str) -> bool:
    return (scratch / "models" / "squeezenet1_1_50.json").read_bytes() != (scratch / "first.json").read_bytes()


def _kept(scratch: Path, out: str, err: str) -> bool:
    return (scratch / "models" / "squeezenet1_1_50.json").read_bytes() == (scratch / "first.json").read_bytes()


def _two_prunes_at_once(scratch: Path, fixtures: Fixtures) -> list[str]:
    """Two `prune` runs of other networks started together into one folder; then the
    manifest is read (by `fingerprint`'s catalogue: `prune` of nothing new lists it)."""
    out = scratch / "models"
    common = ["--levels", "0:80:20", "--input-size", "3,32,32", "--num-classes", "10", "--out", str(out)]
    children = [_child(["prune", "--net", net, *common]) for net in ("squeezenet1_1", "squeezenet1_0")]
    answers = [(child.wait(), child.stderr.read().decode()) for child in children]
    from perf4sight.networks import read_spec

    answered = all(code == 0 or (code == 2 and "another prune" in text and len(text.strip().splitlines()) == 1)
                   for code, text in answers)
    whole = _manifest_agrees(out, read_spec) and len(list(out.glob("*.json"))) == 5 * sum(c == 0 for c, _ in answers)
    (scratch / "answers.json").write_text(json.dumps({"answers": answers, "right": answered and whole}))
    return ["prune", "--net", "squeezenet1_1", "--levels", "0", *common[2:]]


def _manifest_of_both_or_one_refused(scratch: Path, out: str, err: str) -> bool:
    """Each run stored its specs or was refused in one line, and the manifest then listed
    exactly the specs in the folder (before the third run, which rebuilds it)."""
    return json.loads((scratch / "answers.json").read_text())["right"]


PRUNE_AGAIN_CASES = [
    Case("prune again", "two prunes into one folder at once", _two_prunes_at_once, _manifest_of_both_or_one_refused,
         slow=True),
    _prune_again("another input size", {}, {"--input-size": "3,64,64"}),
    _prune_again("another number of classes", {}, {"--num-classes": "100"}),
    _prune_again("another seed", {}, {"--seed": "7"}),
    _prune_again("another mode", {}, {"--mode": "l1-norm"}),
    _prune_again("the level after another (30, then 50)", {}, {"--levels": "30,50"}),
    _prune_again("another seed, written as model files too", {}, {"--seed": "3", "--write-model-files": ""}),
    _prune_again("the same settings again", {}, {}, _kept),
    _prune_again("the same settings, with model files", {}, {"--write-model-files": ""}, _kept),
    _prune_again("another seed with --overwrite", {}, {"--seed": "7", "--overwrite": ""}, _replaced),
    _prune_again("another input size with --overwrite", {}, {"--input-size": "3,64,64", "--overwrite": ""}, _replaced),
]


def _net_named(net: str) -> Callable[[Path, Fixtures], list[str]]:
    """`prune` of a spec whose `net`, the name its specs are written under, is `net`."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        source = scratch / "source" / "alexnet_0.json"
        source.parent.mkdir()
        source.write_text(json.dumps({**json.loads((ZOO / "models" / "alexnet_0.json").read_text()), "net": net}))
        return ["prune", "--net", str(source), "--levels", "10", "--input-size", "3,64,64", "--num-classes", "10",
                "--out", str(scratch / "a" / "b" / "out")]

    return Case("name as path", f"a spec's net {net!r} (prune)", setup)


def _model_file_named(name: str) -> Callable[[Path, Fixtures], list[str]]:
    """[create_network_dataset] naming `name`, a model file found in model_desc_dir's subfolder."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        desc = scratch / "desc"
        (desc / "sub").mkdir(parents=True)
        shutil.copy(ROOT / "examples" / "model_files" / "resnet_like.py", desc / f"{name}.py")
        values = {**_network_base(scratch, fixtures), "networks": f"['{name}']", "model_desc_dir": str(desc),
                  "model_path": str(scratch / "a" / "out")}
        (scratch / "config.ini").write_text(_section("create_network_dataset", values))
        return ["run", "--config", str(scratch / "config.ini")]

    return Case("name as path", f"networks = ['{name}'], a model file in model_desc_dir", setup)


NAME_CASES = [
    *(_net_named(net) for net in ("../escaped", "../../escaped", "sub/net", "/tmp/escaped", "..", ".hidden",
                                  "c:\\net", "a\\..\\b", "")),
    _model_file_named("sub/resnet_like"),
]


# ---------------------------------------------------------------- stored models

def _stored_case(name: str, change: Callable[[Path], None]) -> Case:
    """The shared fitted models copied, the memory model's pair changed, `predict` run."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        models = scratch / "models"
        shutil.copytree(fixtures.models(), models)
        change(models / f"{MEMORY_MODEL}.skops")
        return ["predict", "--models", str(models), "--net", "squeezenet1_0", "--bs", "8"]

    return Case("stored model", name, setup)


def _sha(path: Path) -> None:
    """Fix the header's hash to the model file's bytes and the header, as a careful tamperer would."""
    from perf4sight.fit.store import model_hash

    meta = path.with_suffix(".json")
    data = json.loads(meta.read_text())
    data["sha256"] = model_hash(path.read_bytes(), data)
    meta.write_text(json.dumps(data))


def _model_bytes(content: Callable[[Path], bytes]) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        path.write_bytes(content(path))
        _sha(path)

    return change


class _Payload:
    """Unpickled, it would create the marker: the proof that a pickle was loaded."""

    marker = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _pickle(path: Path) -> bytes:
    _Payload.marker = str(path.parents[2] / "EXECUTED")  # the fixtures' marker: root/<case>/models/file
    return pickle.dumps(_Payload())


def _zip_of_text(path: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("schema.json", "{}")
    return buffer.getvalue()


def _meta(change: Callable[[dict], Any]) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        meta = path.with_suffix(".json")
        data = json.loads(meta.read_text())
        result = change(data)
        meta.write_text(json.dumps(data if result is None else result))

    return edit


def _swap(path: Path) -> None:
    shutil.copy(path.with_name(f"{LATENCY_MODEL}.skops"), path)
    _sha(path)


def _swap_with_metadata(path: Path) -> None:
    for suffix in (".skops", ".json"):
        shutil.copy(path.with_name(LATENCY_MODEL + suffix), path.with_suffix(suffix))
    _meta(lambda m: m.update(target=MEMORY.name))(path)


def _replace(suffix: str, content: bytes | None) -> Callable[[Path], None]:
    """`_replace_file` applied to the file of the stored pair with `suffix`."""
    replace = _replace_file(content)
    return lambda path: replace(path.with_suffix(suffix))


STORED_CASES = [
    _stored_case("latency model copied over memory, hash fixed", _swap),
    _stored_case("latency pair copied over memory, target edited", _swap_with_metadata),
    _stored_case(".skops deleted", lambda p: p.unlink()),
    _stored_case(".skops a folder", _replace(".skops", None)),
    _stored_case(".json deleted", lambda p: p.with_suffix(".json").unlink()),
    _stored_case(".json a folder", _replace(".json", None)),
    _stored_case("a pickle renamed .skops, hash fixed", _model_bytes(_pickle)),
    _stored_case("empty .skops, hash fixed", _model_bytes(lambda p: b"")),
    _stored_case("random bytes, hash fixed", _model_bytes(lambda p: os.urandom(4096))),
    _stored_case("a zip that is not skops, hash fixed", _model_bytes(_zip_of_text)),
    _stored_case("truncated .skops, hash fixed", _model_bytes(lambda p: p.read_bytes()[: len(p.read_bytes()) // 2])),
    _stored_case("another model's bytes, hash not fixed",
                 lambda p: shutil.copy(p.with_name(f"{LATENCY_MODEL}.skops"), p)),
    *(_stored_case(f"metadata {name}", _meta(change)) for name, change in {
        "versions []": lambda m: m.update(versions=[]),
        "versions without scikit-learn": lambda m: m["versions"].update({"scikit-learn": None}),
        "feature_set bogus": lambda m: m.update(feature_set="bogus"),
        "feature_set of another method": lambda m: m.update(feature_set="paper"),
        "feature_probe 'abc'": lambda m: m.update(feature_probe="abc"),
        "feature_probe [[NaN]]": lambda m: m.update(feature_probe=[[float("nan")]]),
        "feature_probe ragged": lambda m: m["feature_probe"][0].append(1.0),
        "fingerprint device ''": lambda m: m["fingerprint"].update(device=""),
        "feature_names []": lambda m: m.update(feature_names=[]),
        "bound_ratio 'abc'": lambda m: m.update(bound_ratio="abc"),
        "bound ratio non-numeric": lambda m: m.update(bound_ratio={**(m.get("bound_ratio") or {}), "ratio": "abc"}),
        "bound ratio NaN": lambda m: m.update(bound_ratio={"quantile": 0.95, "ratio": float("nan"),
                                                           "left_out": "architecture", "calibrated_ratio": None}),
        "bound ratio -1": lambda m: m.update(bound_ratio={"quantile": 0.95, "ratio": -1.0,
                                                          "left_out": "architecture", "calibrated_ratio": None}),
        "family_residuals a string": lambda m: m.update(family_residuals="abc"),
        "family_residuals misaligned": lambda m: m.update(family_residuals={"k": {"params": [1.0], "batch_size": [],
                                                                                   "log_ratio": [0.0]}}),
        "training_ranges 'zzz'": lambda m: m.update(training_ranges="zzz"),
        "fingerprint without its campaign": lambda m: m["fingerprint"].pop("campaign"),
        "feature_probe infinite": lambda m: m["feature_probe"][0].__setitem__(0, float("inf")),
        "format '6'": lambda m: m.update(format="6"),
        "format 5": lambda m: m.update(format=5),
        "format 6.0": lambda m: m.update(format=6.0),
        "method bogus": lambda m: m.update(method="bogus"),
        "method of another class": lambda m: m.update(method="paper"),
        "stage inference": lambda m: m.update(stage="inference"),
        f"target {LATENCY.name}": lambda m: m.update(target=LATENCY.name),
        "n_train -1": lambda m: m.update(n_train=-1),
        "sha256 'x'": lambda m: m.update(sha256="x"),
        "a list": lambda m: [],
        "a string": lambda m: "abc",
        "an empty object": lambda m: {},
    }.items()),
    _stored_case("metadata not JSON", lambda p: p.with_suffix(".json").write_text("{")),
    _stored_case("metadata nested 100000 deep", lambda p: p.with_suffix(".json").write_text(DEEP)),
    _stored_case("metadata 1e999", lambda p: p.with_suffix(".json").write_text(
        p.with_suffix(".json").read_text().replace('"estimator": ', '"estimator": 1e999, "x": ', 1))),
    _stored_case("metadata empty", _replace(".json", b"")),
]


# ---------------------------------------------------------------- architecture specs

def _spec_case(name: str, change: Callable[[dict], Any], command: str = "predict") -> Case:
    """The squeezenet spec at level CHANGED changed by `change` (it may return a replacement),
    then predicted (or pruned)."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        spec = json.loads((fixtures.data / "models" / f"squeezenet_{CHANGED}.json").read_text())
        result = change(spec)
        path = scratch / f"squeezenet_{CHANGED}.json"
        if isinstance(result, bytes):
            path.write_bytes(result)
        elif result == "folder":
            path.mkdir()
        else:
            path.write_text(json.dumps(spec if result is None else result))
        if command == "prune":
            return ["prune", "--net", str(path), "--levels", "10", "--out", str(scratch / "pruned")]
        return ["predict", "--models", str(fixtures.models()), "--net", str(path), "--bs", "8"]

    return Case("spec", f"{name} ({command})", setup)


def _layer(spec: dict, name: str) -> dict:
    return next(entry for entry in spec["layers"] if entry["name"] == name)


def _wider_first_layer(spec: dict) -> None:
    """features.0 at 200 output channels (the base has 96), consistent in both tables."""
    spec["out_channels"]["features.0"] = 200
    _layer(spec, "features.0")["out"][0] = 200
    _layer(spec, "features.3.squeeze")["in"][0] = 200


def _set(layer: str, **values: Any) -> Callable[[dict], None]:
    return lambda spec: _layer(spec, layer).update(values)


_SPEC_EDITS: dict[str, Callable[[dict], Any]] = {
    "features.0 at 200 channels (base 96)": _wider_first_layer,
    "stride [0, 0]": _set("features.0", stride=[0, 0]),
    "stride 'ab'": _set("features.0", stride="ab"),
    "padding [-100, -100]": _set("features.0", padding=[-100, -100]),
    "kernel [1000, 1000]": _set("features.0", kernel=[1000, 1000]),
    "kernel [5, 5] (base 7)": _set("features.0", kernel=[5, 5], padding=[1, 1]),
    "groups 7 on 3 -> 87": _set("features.0", groups=7),
    "groups 3 on 3 -> 87": _set("features.0", groups=3),
    "dilation [0, 0]": _set("features.0", dilation=[0, 0]),
    "bias 'yes'": _set("features.0", bias="yes"),
    "in 'abc'": _set("features.0", **{"in": "abc"}),
    "output size edited": lambda s: _layer(s, "features.0")["out"].__setitem__(1, 7),
    "torchvision list_models": lambda s: s.update(torchvision="list_models"),
    "torchvision __loader__": lambda s: s.update(torchvision="__loader__"),
    "torchvision get_model": lambda s: s.update(torchvision="get_model"),
    "torchvision a detection builder": lambda s: s.update(torchvision="fasterrcnn_resnet50_fpn"),
    "torchvision 5": lambda s: s.update(torchvision=5),
    "kwargs bogus": lambda s: s.update(torchvision_kwargs={"bogus": 1}),
    "kwargs num_classes": lambda s: s.update(torchvision_kwargs={"num_classes": 10}),
    "kwargs weights": lambda s: s.update(torchvision_kwargs={"weights": "DEFAULT"}),
    "kwargs dropout 'x'": lambda s: s.update(torchvision_kwargs={"dropout": "x"}),
    "kwargs version 1_1 (another network)": lambda s: s.update(torchvision_kwargs={"version": "1_1"}),
    "kwargs a list": lambda s: s.update(torchvision_kwargs=[1]),
    "input_size [3, 99999, 99999]": lambda s: s.update(input_size=[3, 99999, 99999]),
    "num_classes huge": lambda s: s.update(num_classes=99999999999999999999),
    "layers 'x'": lambda s: s.update(layers="x"),
    "out_channels 0": lambda s: s["out_channels"].update({"features.0": 0}),
    "a list": lambda s: [],
    "nested 100000 deep": lambda s: DEEP.encode(),
    "a folder": lambda s: "folder",
    "empty file": lambda s: b"",
    "Latin-1 bytes": lambda s: '{"name": "r\u00e9seau"}'.encode("latin-1"),
    "name ''": lambda s: s.update(name=""),
}
SPEC_CASES = [
    *(_spec_case(name, change) for name, change in _SPEC_EDITS.items()),
    *(_spec_case(name, _SPEC_EDITS[name], "prune") for name in (
        "features.0 at 200 channels (base 96)", "stride [0, 0]", "groups 7 on 3 -> 87", "torchvision list_models",
        "kwargs weights")),
]


# ---------------------------------------------------------------- code named by a spec

# A model file that, imported, creates the marker: proof that a spec ran code unasked.
_HOSTILE_MODEL = """
import pathlib
pathlib.Path({marker!r}).touch()


def squeezenet(num_classes=10):
    raise SystemExit("never built")
"""


def _model_desc_case(name: str, place: Callable[[Path, Path, Path], str], command: str = "predict") -> Case:
    """The squeezenet spec at level CHANGED naming, in `model_desc`, a hostile model file that
    `place(scratch, spec folder, marker)` writes outside the spec's folder (and returns as the
    spec says it), then predicted, pruned or fingerprinted."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        specs = scratch / "specs"
        specs.mkdir()
        spec = json.loads((fixtures.data / "models" / f"squeezenet_{CHANGED}.json").read_text())
        spec.update(torchvision=None, torchvision_kwargs=None, model_desc=place(scratch, specs, fixtures.marker))
        path = specs / f"squeezenet_{CHANGED}.json"
        path.write_text(json.dumps(spec))
        if command == "prune":
            return ["prune", "--net", str(path), "--levels", "10", "--out", str(scratch / "pruned")]
        if command == "fingerprint":
            for level in LEVELS:
                if level != CHANGED:
                    shutil.copy(fixtures.data / "models" / f"squeezenet_{level}.json", specs)
            base = _fingerprint_base(fixtures, scratch / "fitted")
            base["pruned_models_storedir"] = str(specs)
            config = scratch / "config.ini"
            config.write_text(_section("fingerprint", base))
            return ["fingerprint", "--config", str(config)]
        return ["predict", "--models", str(fixtures.models()), "--net", str(path), "--bs", "8"]

    return Case("code from data", f"{name} ({command})", setup)


def _hostile(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_HOSTILE_MODEL.format(marker=str(marker)))
    return path


def _linked_model_file(specs: Path, target: Path) -> str:
    (specs / "evil.py").symlink_to(target)
    return "evil.py"


_MODEL_DESC_PLACES: dict[str, Callable[[Path, Path, Path], str]] = {
    "model_desc '../evil.py'": lambda scratch, specs, mark: _hostile(scratch / "evil.py", mark) and "../evil.py",
    "model_desc an absolute path": lambda scratch, specs, mark: str(_hostile(scratch / "elsewhere" / "evil.py", mark)),
    "model_desc 'sub/../../evil.py:squeezenet'": lambda scratch, specs, mark: (
        _hostile(scratch / "evil.py", mark) and "sub/../../evil.py:squeezenet"),
    "model_desc a link in the spec's folder to a file outside": lambda scratch, specs, mark: _linked_model_file(
        specs, _hostile(scratch / "elsewhere" / "evil.py", mark)),
    "model_desc in a folder beside the specs' ('../models_x/evil.py')": lambda scratch, specs, mark: (
        _hostile(scratch / "models_x" / "evil.py", mark) and "../models_x/evil.py"),
}

CODE_CASES = [
    *(_model_desc_case(name, place) for name, place in _MODEL_DESC_PLACES.items()),
    _model_desc_case("model_desc '../evil.py'", _MODEL_DESC_PLACES["model_desc '../evil.py'"], "prune"),
    _model_desc_case("model_desc an absolute path", _MODEL_DESC_PLACES["model_desc an absolute path"], "fingerprint"),
]


# ---------------------------------------------------------------- bundles on the device

def _run_bundle(argv: list[str]) -> tuple[int | None, str, str, str]:
    """A bundle's runner (`argv[0]` the bundle, the rest its options), as on a device: a
    Python of its own, perf4sight not importable."""
    bundle, *options = argv
    without = ("import runpy, sys; sys.modules['perf4sight'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", without, str(Path(bundle) / "run_profile.py"), "--quiet", *options],
                          capture_output=True, text=True, cwd=bundle)
    return done.returncode, done.stdout, done.stderr, ""


def _bundle_case(name: str, change: Callable[[Path, Path], list[str]],
                 check: Callable[[Path, str, str], bool] | None = None) -> Case:
    """The shared bundle copied (its logs too) to `scratch/bundle`, changed by
    `change(bundle, scratch)`, which returns the runner's options; the runner run."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        bundle = Path(shutil.copytree(fixtures.bundle(), scratch / "bundle"))
        return [str(bundle), *change(bundle, scratch)]

    return Case("bundle", name, setup, check, slow=True, run=_run_bundle)


def _bundle_record(key: str, value: Any) -> Callable[[Path, Path], list[str]]:
    def change(bundle: Path, scratch: Path) -> list[str]:
        record = json.loads((bundle / "bundle.json").read_text())
        record["defaults"][key] = value
        (bundle / "bundle.json").write_text(json.dumps(record))
        return []

    return change


def _bundle_without(name: str) -> Callable[[Path, Path], list[str]]:
    """The bundle copied to a device without one of its files, run there for the first time."""
    def change(bundle: Path, scratch: Path) -> list[str]:
        (bundle / name).unlink()
        shutil.rmtree(bundle / "logs")
        return []

    return change


def _options(*options: str) -> Callable[[Path, Path], list[str]]:
    return lambda bundle, scratch: list(options)


def _another_network_file(bundle: Path, scratch: Path) -> list[str]:
    """On a device for the first time, the bundle's model file replaced by another network's."""
    shutil.rmtree(bundle / "logs")
    (bundle / "models" / "squeezenet_0.py").write_text(
        "import torchvision\n\n\ndef squeezenet(num_classes=10):\n"
        "    return torchvision.models.squeezenet1_0(num_classes=num_classes)\n")
    return []


def _another_network_named_alike(bundle: Path, scratch: Path) -> list[str]:
    """A second bundle whose squeezenet_0 is squeezenet1_0 (file and spec agree), its logs
    sent to the first bundle's folder."""
    import torchvision

    from perf4sight.networks import spec_from_module, write_model_file, write_spec

    module = torchvision.models.squeezenet1_0(num_classes=10)
    write_spec(spec_from_module(module, name="squeezenet_0", net="squeezenet", prune_level=0, input_size=(3, 32, 32),
                                num_classes=10, torchvision_name="squeezenet1_0"), bundle / "models" / "squeezenet_0.json")
    write_model_file(module, bundle / "models" / "squeezenet_0.py", net="squeezenet", name="squeezenet_0",
                     num_classes=10, input_size=(3, 32, 32))
    first = shutil.copytree(bundle / "logs", scratch / "first_logs")
    shutil.rmtree(bundle / "logs")
    return ["--log-dir", str(first)]


def _moved(bundle: Path, scratch: Path) -> list[str]:
    """The bundle moved (another path, its test config's models the same files), run again."""
    moved = shutil.move(str(bundle), str(scratch / "elsewhere"))
    os.symlink(moved, bundle)  # the runner is started where the case expects the bundle
    return []


def _journal_rows(scratch: Path) -> int:
    return sum(len((scratch / "elsewhere" / "logs" / kind / "squeezenet_0.csv").read_text().splitlines()) - 1
               for kind in ("memory", "latency"))


BUNDLE_CASES = [
    _bundle_case("its model file replaced by another network's", _another_network_file),
    _bundle_case("a second bundle (another network under the same name) into the first's log folder",
                 _another_network_named_alike),
    _bundle_case("the bundle moved elsewhere resumes its logs, nothing run twice", _moved,
                 lambda scratch, out, err: _journal_rows(scratch) == 4),
    _bundle_case("copied without its model file", _bundle_without("models/squeezenet_0.py")),
    _bundle_case("copied without its spec (dataset spec)", _bundle_without("models/squeezenet_0.json")),
    _bundle_case("copied without its test config", lambda bundle, scratch: _bundle_without(
        json.loads((bundle / "bundle.json").read_text())["defaults"]["test_config"])(bundle, scratch)),
    _bundle_case("bundle.json iterations = 2.5", _bundle_record("iterations", 2.5)),
    _bundle_case("bundle.json iterations = true", _bundle_record("iterations", True)),
    _bundle_case("bundle.json warmup = null", _bundle_record("warmup", None)),
    _bundle_case("bundle.json device = 5", _bundle_record("device", 5)),
    _bundle_case("--iterations given twice", _options("--iterations", "2", "--iterations=3")),
    _bundle_case("--retry-failed and --no-retry-failed", _options("--retry-failed", "--no-retry-failed")),
]


# ---------------------------------------------------------------- stored models written by two or killed

def _predict_at(models: Path) -> list[str]:
    return ["predict", "--models", str(models), "--net", "squeezenet1_0", "--bs", "8"]


def _same_answer_as(which: str) -> Callable[[Path, str, str], bool]:
    """Whether `predict` answered as it does on the set `scratch/<which>` alone."""
    def check(scratch: Path, out: str, err: str) -> bool:
        code, expected, _, _ = invoke(_predict_at(scratch / which))
        return code == 0 and out == expected

    return check


def _half_replaced(listed: bool) -> Callable[[Path, Fixtures], list[str]]:
    """The old models with the other set staged beside them, as a fingerprint killed after
    (`listed`) or before it listed its new set leaves the folder; one file already renamed
    when listed."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        old, new = shutil.copytree(fixtures.models(), scratch / "old"), shutil.copytree(fixtures.other_models(),
                                                                                        scratch / "new")
        models = shutil.copytree(old, scratch / "models")
        names = sorted(p.name for p in Path(new).glob("training_*"))
        for name in names:
            shutil.copy(Path(new) / name, models / f".{name}.staged")
        if listed:
            (models / ".replacing.json").write_text(json.dumps(names))
            os.replace(models / f".{names[0]}.staged", models / names[0])
        return _predict_at(models)

    return setup


def _busy_folder(scratch: Path, fixtures: Fixtures) -> list[str]:
    """Another fingerprint holding the folder (a process of its own, for 60 s at most)."""
    models = shutil.copytree(fixtures.models(), scratch / "models")
    holder = _child_python(f"import time; from perf4sight.fit.store import model_folder_lock\n"
                           f"with model_folder_lock({str(models)!r}):\n    print('held', flush=True); time.sleep(60)")
    holder.stdout.readline()
    config = scratch / "fit.ini"
    config.write_text(_section("fingerprint", {**_fingerprint_base(fixtures, models), "overwrite": "True"}))
    return ["fingerprint", "--config", str(config)]


def _child_python(code: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)


def _killed_fingerprint(moment: str) -> Callable[[Path, Fixtures], list[str]]:
    """A fingerprint refitting a folder's models (overwrite) killed at `moment`: 'staged' as
    soon as a new file is staged, 'listed' as soon as the new set is listed, or after that many
    seconds; then `predict` on the folder."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        models = shutil.copytree(fixtures.models(), scratch / "models")
        config = scratch / "fit.ini"
        config.write_text(_section("fingerprint", {**_fingerprint_base(fixtures, models), "overwrite": "True",
                                                   "train_logs": "[0, 90]"}))
        child = _child(["fingerprint", "--config", str(config)])
        if moment == "staged":
            _until(child, lambda: any(models.glob(".*.staged")), 120, every_s=0.001)
        elif moment == "listed":
            _until(child, (models / ".replacing.json").exists, 120, every_s=0.001)
        else:
            _until(child, lambda: False, float(moment), every_s=0.001)
        child.send_signal(signal.SIGKILL)
        child.wait()
        return _predict_at(models)

    return setup


def _one_set(scratch: Path, out: str, err: str) -> bool:
    """Whether the folder's models, as a reader finds them, are of one fitting run."""
    from perf4sight.files import current_file

    fitted = {json.loads(current_file(path).read_text())["fingerprint"]["fitted_at"]
              for path in (scratch / "models").glob("training_*.json")}
    return len(fitted) == 1


def _two_at_once(scratch: Path, fixtures: Fixtures) -> list[str]:
    """Two fingerprints started together into one folder: each ends with its models stored or
    the one line that another is fitting there; the folder holds one run's set."""
    models = scratch / "models"
    config = scratch / "fit.ini"
    config.write_text(_section("fingerprint", {**_fingerprint_base(fixtures, models), "overwrite": "True"}))
    children = [_child(["fingerprint", "--config", str(config)]) for _ in range(2)]
    answers = [(child.wait(), child.stderr.read().decode()) for child in children]
    (scratch / "answers.json").write_text(json.dumps(answers))
    return _predict_at(models)


def _each_stored_or_refused(scratch: Path, out: str, err: str) -> bool:
    answers = json.loads((scratch / "answers.json").read_text())
    return _one_set(scratch, out, err) and all(
        code == 0 or (code == 2 and "another fingerprint" in text and len(text.strip().splitlines()) == 1)
        for code, text in answers)


STORE_CASES = [
    Case("store", "a fingerprint into a folder another is fitting into", _busy_folder, slow=True),
    Case("store", "a set staged but not listed (killed before): the old set answers", _half_replaced(False),
         _same_answer_as("old")),
    Case("store", "a set listed, one file renamed (killed between): the new set answers", _half_replaced(True),
         _same_answer_as("new")),
    Case("store", "a fingerprint killed as soon as it staged a file", _killed_fingerprint("staged"), _one_set,
         slow=True),
    Case("store", "a fingerprint killed as soon as it listed its set", _killed_fingerprint("listed"), _one_set,
         slow=True),
    Case("store", "a fingerprint killed after 4 s", _killed_fingerprint("4"), _one_set, slow=True),
    Case("store", "two fingerprints into one folder at once", _two_at_once, _each_stored_or_refused, slow=True),
]


# ---------------------------------------------------------------- kills during prune

_PRUNE_ARGS = ["prune", "--net", "squeezenet1_1", "--levels", "0:90:10", "--input-size", "3,32,32",
               "--num-classes", "10", "--write-model-files"]


def _kill_case(name: str, moments: list[str]) -> Case:
    """`prune` started and killed (SIGKILL) at each moment in turn ('3 specs': as soon as the
    folder holds three specs, in the middle of the run's writes; '2.5': after 2.5 s; 'end':
    once it has ended by itself), then run to the end."""
    def setup(scratch: Path, fixtures: Fixtures) -> list[str]:
        return [str(scratch / "models"), *moments]

    return Case("kill", name, setup, slow=True)


def _wait(child: subprocess.Popen, out: Path, moment: str) -> None:
    """Return at `moment` of the child's run (or when it has ended)."""
    if moment == "end":
        child.wait()
        return
    if not moment.endswith(" specs"):
        time.sleep(float(moment))
        return
    wanted = int(moment.split()[0])
    _until(child, lambda: out.is_dir() and len(list(out.glob("*.json"))) >= wanted, 300, every_s=0.005)


def _until(child: subprocess.Popen, ready: Callable[[], bool], timeout_s: float, *, every_s: float) -> None:
    """Return once `ready()` holds, the child has ended or `timeout_s` has passed, looking every
    `every_s`: the sleep between looks leaves the CPU to the child being watched."""
    deadline = time.monotonic() + timeout_s
    while child.poll() is None and time.monotonic() < deadline and not ready():
        time.sleep(every_s)


def _child(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    entry = "from perf4sight.cli import entry; entry()"
    return subprocess.Popen([sys.executable, "-c", entry, "--quiet", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_outcome(argv: list[str]) -> tuple[str, str]:
    """Run the kills, then the whole command, and compare the manifest with the folder."""
    from perf4sight.networks import read_spec

    out, moments = Path(argv[0]), argv[1:]
    command = [*_PRUNE_ARGS, "--out", str(out)]
    found = []  # specs (and temporaries) present after each kill
    for moment in moments:
        child = _child(command)
        _wait(child, out, moment)
        child.send_signal(signal.SIGKILL)
        child.wait()
        if not _manifest_agrees(out, read_spec):
            return "lost", f"after the kill at {moment} the manifest and the specs disagree"
        found.append(f"{len(list(out.glob('*.json')))} ({len(list(out.glob('.*.tmp')))} temporaries)")
    child = _child(command)
    _, err = child.communicate()
    if child.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        return ("traceback" if "Traceback" in err.decode(errors="replace") else "other"), (lines or [""])[-1]
    leftovers = sorted(p.name for p in out.glob(".*.tmp"))
    if leftovers:
        return "lost", f"temporary files left: {', '.join(leftovers)}"
    if not _manifest_agrees(out, read_spec) or len(list(out.glob("*.json"))) != 10:
        return "lost", "the manifest and the specs disagree after the rerun"
    return "right", (f"specs after each kill: {', '.join(map(str, found))}; after the rerun "
                     f"{len(list(out.glob('*.json')))}, the manifest agrees, no temporaries")


def _manifest_agrees(out: Path, read_spec: Callable[[Path], dict]) -> bool:
    """Whether manifest.csv lists exactly the specs in `out` (none yet: no manifest needed)."""
    specs = sorted(str(p) for p in out.glob("*.json")) if out.is_dir() else []
    manifest = out / "manifest.csv"
    if not manifest.is_file():
        return len(specs) <= 1  # killed before or during the first spec's manifest
    import pandas as pd

    listed = sorted(pd.read_csv(manifest)["spec_file"].astype(str))
    for spec in specs:
        read_spec(spec)  # whole, never half written
    return listed == specs or (len(specs) == len(listed) + 1 and set(listed) <= set(specs))


KILL_CASES = [
    _kill_case("killed at the first spec", ["1 specs"]),
    _kill_case("killed at the third spec", ["3 specs"]),
    _kill_case("killed at the ninth spec", ["9 specs"]),
    _kill_case("killed twice", ["2 specs", "6"]),
    _kill_case("killed before any spec", ["0.5"]),
    _kill_case("run to the end, then a rerun killed", ["end", "4"]),
]


def _stale_temporary(scratch: Path, fixtures: Fixtures) -> list[str]:
    """A spec folder holding what a writer killed mid-write leaves: `.<name>.<pid>.tmp` of a
    process that has ended."""
    out = scratch / "models"
    out.mkdir()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(ended.stdout)
    (out / f".squeezenet1_1_0.json.{pid}.tmp").write_text('{"name": "squ')
    (out / f".squeezenet1_1_0.py.{pid}.tmp").write_text("import tor")
    (out / f".other_file.csv.{pid}.tmp").write_text("a|b")
    return ["prune", "--net", "squeezenet1_1", "--levels", "0", "--input-size", "3,32,32", "--num-classes", "10",
            "--write-model-files", "--out", str(out)]


def _no_temporaries(scratch: Path, out: str, err: str) -> bool:
    return not list((scratch / "models").glob(".*.tmp")) and (scratch / "models" / "squeezenet1_1_0.json").is_file()


LEFTOVER_CASES = [Case("leftover", "temporaries of a killed writer", _stale_temporary, _no_temporaries)]


def catalogue() -> list[Case]:
    """Every case, in the order the table lists them."""
    configs = [_config_case(section, key, value) for section, key, value in BAD_VALUES]
    files = [*FILE_CASES, Case("config", "the config file is missing", _missing_config)]
    return [*configs, *files, *CLI_CASES, *LOG_CASES, *ROW_CASES, *SET_CASES, *STORED_CASES, *SPEC_CASES,
            *CODE_CASES, *SPEC_LOG_CASES, *OUTPUT_CASES, *PRUNE_AGAIN_CASES, *NAME_CASES, *LEFTOVER_CASES, *KILL_CASES,
            *BUNDLE_CASES, *STORE_CASES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="",
                        help="comma-separated categories: config, cli, log, log set, stored model, spec, code from data, output, "
                             "prune again, name as path, leftover, kill, bundle, store")
    parser.add_argument("--list", action="store_true", help="print every case's outcome")
    parser.add_argument("--keep", type=Path, default=None, help="scratch folder to keep (default: a temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import tempfile

    only = {c.strip() for c in args.only.split(",") if c.strip()}
    cases = [c for c in catalogue() if not only or c.category in only]
    with tempfile.TemporaryDirectory() as temporary:
        root = args.keep or Path(temporary)
        root.mkdir(parents=True, exist_ok=True)
        fixtures = Fixtures(root=root)
        results = []
        for k, case in enumerate(cases):
            results.append(classify(case, root / f"case{k:03d}", fixtures))
            if args.list:
                r = results[-1]
                print(f"{r.outcome:9} {r.seconds:6.1f}s  {case.id}  ->  {r.detail}", flush=True)
    table: dict[str, Counter] = {}
    for r in results:
        table.setdefault(r.case.category, Counter())[r.outcome] += 1
    total = sum(table.values(), Counter())
    print(f"\n{'category':14} {'tried':>5} " + " ".join(f"{o:>9}" for o in OUTCOMES))
    for category, counts in [*table.items(), ("total", total)]:
        print(f"{category:14} {sum(counts.values()):5d} " + " ".join(f"{counts[o]:9d}" for o in OUTCOMES))
    bad = [r for r in results if r.outcome not in ("one line", "right")]
    for r in bad:
        print(f"  {r.outcome}: {r.case.id}: {r.detail}")


if __name__ == "__main__":
    main()
