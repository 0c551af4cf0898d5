"""The test config: which models, batch sizes, stages and variables to profile.

It keeps the original tool's .ini layout (a section per network with the list keys
`test_var`, `bs`, `dataset`, `net_name`, `exec_stage`, `model`) so that a config made
by either tool runs on the other. It is made on the host, where the pruned models
live, and copied to the device, hence the rewrite of the model paths.
"""

from __future__ import annotations

import ast
import configparser
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf4sight.config import STAGES, TARGET_COLUMNS, ProfileSettings, check_batch_sizes, read_ini
from perf4sight.errors import ConfigError
from perf4sight.files import write_text

__all__ = [
    "DATASETS",
    "TEST_VARIABLES",
    "ProfileTest",
    "check_test_settings",
    "dataset_load_options",
    "create_test_config",
    "read_test_config",
    "find_model_files",
]

# dataset name -> (input size C,H,W, classes); 'spec' takes both from the model itself.
DATASETS: dict[str, tuple[tuple[int, int, int], int] | None] = {
    "spec": None,
    "imagenet": ((3, 224, 224), 1000),
    "cifar10": ((3, 32, 32), 10),
    "cifar100": ((3, 32, 32), 100),
}
TEST_VARIABLES = tuple(TARGET_COLUMNS)
_KEYS = ("test_var", "bs", "dataset", "net_name", "exec_stage", "model")
_MODEL_SUFFIXES = (".py", ".json")


def dataset_load_options(dataset: str) -> dict[str, Any]:
    """The network loader's `input_size` and `num_classes` for a `DATASETS` name (none
    for `spec`: the model's own): what a test ran at, for the profiler and for fitting."""
    shape = DATASETS[dataset]
    return {} if shape is None else {"input_size": shape[0], "num_classes": shape[1]}


@dataclass(frozen=True)
class ProfileTest:
    """One test: a model at one batch size, stage and variable."""

    test_var: str
    bs: int
    dataset: str
    net_name: str
    stage: str
    model: str

    @property
    def log_name(self) -> str:
        """The CSV file name stem: the model file's stem (`resnet18_50`), as the original."""
        return Path(self.model.split(":")[0]).stem

    @property
    def key(self) -> tuple[str, int, str, str, str, str]:
        """What identifies the test in a log, for resuming."""
        return (self.test_var, self.bs, self.dataset, self.net_name, self.stage, self.model)

    @property
    def group(self) -> tuple[str, str, str, str, str]:
        """Tests that differ only in batch size (the unit of `till_first_fail`)."""
        return (self.model, self.net_name, self.dataset, self.stage, self.test_var)

    def params(self) -> dict[str, Any]:
        """The original's `params` dict, keys in its order."""
        return {
            "test_var": self.test_var,
            "bs": self.bs,
            "dataset": self.dataset,
            "net_name": self.net_name,
            "exec_stage": self.stage,
            "model": self.model,
        }

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ProfileTest:
        """Inverse of `params()`; raises KeyError/ValueError on a malformed dict."""
        return cls(
            test_var=str(params["test_var"]),
            bs=int(params["bs"]),
            dataset=str(params["dataset"]),
            net_name=str(params["net_name"]),
            stage=str(params["exec_stage"]),
            model=str(params["model"]),
        )


def find_model_files(directory: Path, network: str) -> list[Path]:
    """Model files `<network>_<level>.py|.json` in `directory`, by level; .py wins a tie.

    A .py model file is what the original tool loads, so it is listed when both exist.
    """
    pattern = re.compile(rf"^{re.escape(network)}_([^_]+)$")
    by_stem: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        if path.suffix in _MODEL_SUFFIXES and pattern.match(path.stem):
            if path.stem not in by_stem or path.suffix == ".py":
                by_stem[path.stem] = path
    return sorted(by_stem.values(), key=lambda p: _level_key(pattern.match(p.stem).group(1)))


def _level_key(level: str) -> tuple[int, float, str]:
    try:
        return (0, float(level), "")
    except ValueError:
        return (1, 0.0, level)


def check_test_settings(settings: ProfileSettings) -> None:
    """Refuse [profile] values no test config can hold (the models are looked up later)."""
    _check_choices("[profile] profile_variables", settings.profile_variables, TEST_VARIABLES)
    _check_choices("[profile] stage", settings.stage, STAGES)
    _check_choices("[profile] dataset", [settings.dataset], tuple(DATASETS))
    check_batch_sizes(settings.bs, "[profile] bs")
    if settings.local_model_loc is None:
        raise ConfigError("[profile] local_model_loc: needed to find the models of the test config")


def create_test_config(settings: ProfileSettings) -> Path:
    """Write the test config for `settings.network` to `settings.test_config`; returns its path."""
    if not settings.network:
        raise ConfigError("[profile] network: no network listed to create a test config for")
    check_test_settings(settings)
    local = settings.local_model_loc
    assert local is not None  # check_test_settings refuses a missing one
    if not local.is_dir():
        raise ConfigError(f"[profile] local_model_loc: directory not found: {local}")
    sections = []
    for network in settings.network:
        files = find_model_files(local, network)
        if not files:
            raise ConfigError(
                f"[profile] network '{network}': no model file {network}_<level>.py or .json "
                f"in local_model_loc {local}"
            )
        device_dir = settings.device_model_loc
        models = [str(device_dir / f.name) if device_dir is not None else str(f) for f in files]
        sections.append(_section_text(network, settings, models))
    path = settings.test_config
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "\n".join(sections))
    return path


def _section_text(network: str, settings: ProfileSettings, models: list[str]) -> str:
    head = "model= ["
    model_lines = ",\n".join(
        (head if i == 0 else " " * len(head)) + repr(m) for i, m in enumerate(models)
    )
    return (
        f"[{network.upper()}]\n"
        f"test_var= {list(settings.profile_variables)!r}\n"
        f"bs= {list(settings.bs)!r}\n"
        f"dataset= {[settings.dataset]!r}\n"
        f"net_name= {[network]!r}\n"
        f"exec_stage= {list(settings.stage)!r}\n"
        f"{model_lines}]\n"
    )


def read_test_config(path: str | Path) -> list[ProfileTest]:
    """All tests of a test config (ours or the original's), grouped by model, bs ascending."""
    path = Path(path)
    parser = read_ini(path, kind="test config")
    if not parser.sections():
        raise ConfigError(f"{path}: no sections; expected one per network")
    tests: list[ProfileTest] = []
    for name in parser.sections():
        values = _read_section(parser[name], where=f"{path} [{name}]")
        for dataset, net_name, model, stage, test_var in itertools.product(
            values["dataset"], values["net_name"], values["model"],
            values["exec_stage"], values["test_var"],
        ):
            tests.extend(
                ProfileTest(test_var, bs, dataset, net_name, stage, model)
                for bs in sorted(set(values["bs"]))
            )
    return list(dict.fromkeys(tests))


def _read_section(section: configparser.SectionProxy, *, where: str) -> dict[str, list[Any]]:
    unknown = [k for k in section if k not in _KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}'; known keys: {', '.join(_KEYS)}")
    values: dict[str, list[Any]] = {}
    for key in _KEYS:
        if key not in section:
            raise ConfigError(f"{where}: missing key '{key}'")
        try:
            value = ast.literal_eval(section[key].strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ConfigError(f"{where} {key}: not a Python list literal: {section[key]!r}") from None
        value = list(value) if isinstance(value, (list, tuple)) else [value]
        if not value:
            raise ConfigError(f"{where} {key}: empty list")
        values[key] = value
    for key in ("dataset", "net_name", "exec_stage", "model", "test_var"):
        bad = [v for v in values[key] if not isinstance(v, str) or not v]
        if bad:
            raise ConfigError(f"{where} {key}: expected strings, got {bad[0]!r}")
    check_batch_sizes(values["bs"], f"{where} bs")
    _check_choices(f"{where} test_var", values["test_var"], TEST_VARIABLES)
    _check_choices(f"{where} exec_stage", values["exec_stage"], STAGES)
    _check_choices(f"{where} dataset", values["dataset"], tuple(DATASETS))
    return values


def _check_choices(where: str, values: list[Any], allowed: tuple[str, ...]) -> None:
    """Known values, at least one: an empty list would make a test config with no tests."""
    if not values:
        raise ConfigError(f"{where}: empty list; expected one or more of {', '.join(allowed)}")
    for value in values:
        if value not in allowed:
            raise ConfigError(f"{where}: unknown value {value!r}; expected one of {', '.join(allowed)}")


