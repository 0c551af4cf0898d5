"""The test config: which models, batch sizes, stages and variables to profile.

It keeps the original tool's .ini layout (a section per network with the list keys
`test_var`, `bs`, `dataset`, `net_name`, `exec_stage`, `model`) so that a config made
by either tool runs on the other. A section may add the training recipe's list keys
(`RECIPE_COLUMNS`: `optimizer`, `precision`, `trainable`, `checkpoint_segments`), which
the original's reader ignores; the tests are the product of every list, recipes
included, and a section without them runs the default recipe. An inference test runs
only its recipe's precision (`Recipe.for_stage`). It is made on the host
(`perf4sight.profile`) and read here, on the device.
"""

import ast
import configparser
import itertools
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Tuple, Union

from .checks import read_ini
from .definitions import DATASETS, STAGES, TEST_VARIABLES, check_batch_sizes, check_choices
from .errors import ConfigError
from .recipe import DEFAULT_RECIPE, RECIPE_COLUMNS, Recipe

__all__ = ["ProfileTest", "read_test_config"]

KEYS = ("test_var", "bs", "dataset", "net_name", "exec_stage", "model")


class ProfileTest(NamedTuple):
    """One test: a model at one batch size, stage, variable and training recipe."""

    test_var: str
    bs: int
    dataset: str
    net_name: str
    stage: str
    model: str
    recipe: Recipe = DEFAULT_RECIPE

    @property
    def log_name(self) -> str:
        """The CSV file name stem: the model file's stem (`resnet18_50`), as the original."""
        return Path(self.model.split(":")[0]).stem

    @property
    def key(self) -> Tuple[str, int, str, str, str, str, Recipe]:
        """What identifies the test in a log, for resuming: its model by name, not by the
        path it had (a bundle moved, a config written with other relative paths); that a
        recorded row measured the same model file is checked by its digest (`campaign`)."""
        return (self.test_var, self.bs, self.dataset, self.net_name, self.stage, self.log_name, self.recipe)

    @property
    def group(self) -> Tuple[str, str, str, str, str, Recipe]:
        """Tests that differ only in batch size (the unit of `till_first_fail`)."""
        return (self.log_name, self.net_name, self.dataset, self.stage, self.test_var, self.recipe)

    def params(self) -> Dict[str, Any]:
        """The original's `params` dict, keys in its order, then, for a recipe other than
        the default (which the original's runs are), the recipe's (`RECIPE_COLUMNS`)."""
        params = {
            "test_var": self.test_var,
            "bs": self.bs,
            "dataset": self.dataset,
            "net_name": self.net_name,
            "exec_stage": self.stage,
            "model": self.model,
        }
        if not self.recipe.is_default:
            params.update(self.recipe.columns())
        return params

    @classmethod
    def from_params(cls, params: Dict[str, Any]) -> "ProfileTest":
        """Inverse of `params()` (the original's dict, without a recipe, is the default
        recipe's); raises KeyError/ValueError on a malformed dict."""
        return cls(
            test_var=str(params["test_var"]),
            bs=int(params["bs"]),
            dataset=str(params["dataset"]),
            net_name=str(params["net_name"]),
            stage=str(params["exec_stage"]),
            model=str(params["model"]),
            recipe=Recipe.from_columns(params, where="params", error=ValueError),
        )


def read_test_config(path: Union[str, Path]) -> List[ProfileTest]:
    """All tests of a test config (ours or the original's), grouped by model, bs ascending."""
    path = Path(path)
    parser = read_ini(path, kind="test config")
    if not parser.sections():
        raise ConfigError("{}: no sections; expected one per network".format(path))
    tests: List[ProfileTest] = []
    for name in parser.sections():
        where = "{} [{}]".format(path, name)
        values = _read_section(parser[name], where=where)
        recipes = [Recipe.from_columns(dict(zip(RECIPE_COLUMNS, combination)), where=where, error=ConfigError)
                   for combination in itertools.product(*(values[key] for key in RECIPE_COLUMNS))]
        for dataset, net_name, model, stage, test_var, recipe in itertools.product(
            values["dataset"], values["net_name"], values["model"],
            values["exec_stage"], values["test_var"], recipes,
        ):
            tests.extend(
                ProfileTest(test_var, bs, dataset, net_name, stage, model, recipe.for_stage(stage))
                for bs in sorted(set(values["bs"]))
            )
    return list(dict.fromkeys(tests))


def _read_section(section: configparser.SectionProxy, *, where: str) -> Dict[str, List[Any]]:
    known = KEYS + RECIPE_COLUMNS
    unknown = [k for k in section if k not in known]
    if unknown:
        raise ConfigError("{}: unknown key '{}'; known keys: {}".format(where, unknown[0], ", ".join(known)))
    values: Dict[str, List[Any]] = {}
    for key in known:
        if key not in section:
            if key in RECIPE_COLUMNS:  # the original's sections: the default recipe
                values[key] = [getattr(DEFAULT_RECIPE, key)]
                continue
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
