"""The test config: which models, batch sizes, stages and variables to profile.

It keeps the original tool's .ini layout (a section per network with the list keys
`test_var`, `bs`, `dataset`, `net_name`, `exec_stage`, `model`) so that a config made
by either tool runs on the other. It is made on the host (`perf4sight.profile`) and
read here, on the device.
"""

import ast
import configparser
import itertools
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Tuple, Union

from .checks import read_ini
from .definitions import DATASETS, STAGES, TEST_VARIABLES, check_batch_sizes, check_choices
from .errors import ConfigError

__all__ = ["ProfileTest", "read_test_config"]

KEYS = ("test_var", "bs", "dataset", "net_name", "exec_stage", "model")


class ProfileTest(NamedTuple):
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
    def key(self) -> Tuple[str, int, str, str, str, str]:
        """What identifies the test in a log, for resuming."""
        return (self.test_var, self.bs, self.dataset, self.net_name, self.stage, self.model)

    @property
    def group(self) -> Tuple[str, str, str, str, str]:
        """Tests that differ only in batch size (the unit of `till_first_fail`)."""
        return (self.model, self.net_name, self.dataset, self.stage, self.test_var)

    def params(self) -> Dict[str, Any]:
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
    def from_params(cls, params: Dict[str, Any]) -> "ProfileTest":
        """Inverse of `params()`; raises KeyError/ValueError on a malformed dict."""
        return cls(
            test_var=str(params["test_var"]),
            bs=int(params["bs"]),
            dataset=str(params["dataset"]),
            net_name=str(params["net_name"]),
            stage=str(params["exec_stage"]),
            model=str(params["model"]),
        )


def read_test_config(path: Union[str, Path]) -> List[ProfileTest]:
    """All tests of a test config (ours or the original's), grouped by model, bs ascending."""
    path = Path(path)
    parser = read_ini(path, kind="test config")
    if not parser.sections():
        raise ConfigError("{}: no sections; expected one per network".format(path))
    tests: List[ProfileTest] = []
    for name in parser.sections():
        values = _read_section(parser[name], where="{} [{}]".format(path, name))
        for dataset, net_name, model, stage, test_var in itertools.product(
            values["dataset"], values["net_name"], values["model"],
            values["exec_stage"], values["test_var"],
        ):
            tests.extend(
                ProfileTest(test_var, bs, dataset, net_name, stage, model)
                for bs in sorted(set(values["bs"]))
            )
    return list(dict.fromkeys(tests))


def _read_section(section: configparser.SectionProxy, *, where: str) -> Dict[str, List[Any]]:
    unknown = [k for k in section if k not in KEYS]
    if unknown:
        raise ConfigError("{}: unknown key '{}'; known keys: {}".format(where, unknown[0], ", ".join(KEYS)))
    values: Dict[str, List[Any]] = {}
    for key in KEYS:
        if key not in section:
            raise ConfigError("{}: missing key '{}'".format(where, key))
        try:
            value = ast.literal_eval(section[key].strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ConfigError("{} {}: not a Python list literal: {!r}".format(where, key, section[key])) from None
        value = list(value) if isinstance(value, (list, tuple)) else [value]
        if not value:
            raise ConfigError("{} {}: empty list".format(where, key))
        values[key] = value
    for key in ("dataset", "net_name", "exec_stage", "model", "test_var"):
        bad = [v for v in values[key] if not isinstance(v, str) or not v]
        if bad:
            raise ConfigError("{} {}: expected strings, got {!r}".format(where, key, bad[0]))
    check_batch_sizes(values["bs"], "{} bs".format(where), ConfigError)
    check_choices("{} test_var".format(where), values["test_var"], TEST_VARIABLES, ConfigError)
    check_choices("{} exec_stage".format(where), values["exec_stage"], STAGES, ConfigError)
    check_choices("{} dataset".format(where), values["dataset"], tuple(DATASETS), ConfigError)
    return values
