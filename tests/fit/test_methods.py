"""Regression methods follow scikit-learn's estimator contract and the METHODS registry's rules."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.validation import check_is_fitted
from torch import nn

from perf4sight.errors import ConfigError
from perf4sight.architecture import Detail
from perf4sight.features import FEATURE_SETS
from perf4sight.fit import DEFAULT_METHOD, METHODS, PaperExtraTrees, resolve_method
from perf4sight.fit.physical import PhysicalRegressor, ReplayRegressor
from perf4sight.networks import load_architecture

MEMORY_ONLY = ("floor_mib_", "library_mib_", "capacity_mib_")


@parametrize_with_checks([PaperExtraTrees(n_estimators=5)])
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


def _net(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(2 * width, 10),
    )


@pytest.fixture(scope="module")
def features() -> dict[str, pd.DataFrame]:
    """Each physical method's features for two small networks at five batch sizes."""
    archs = [load_architecture(_net(width), input_size=(3, 16, 16), needs=Detail.LIFETIMES) for width in (8, 16)]
    sizes = [2, 4, 8, 16, 32]
    return {
        feature_set: pd.concat([FEATURE_SETS[feature_set](arch, sizes, "training") for arch in archs],
                               ignore_index=True)
        for feature_set in ("network", "replay")
    }


def _targets(X: pd.DataFrame) -> dict[str, np.ndarray]:  # noqa: N803
    """Made-up measurements that grow with the batch size and the network's state."""
    batch, state = X["batch_size"].to_numpy(float), X["param_state_bytes"].to_numpy(float)
    return {"mem_used_mib": 300 + 2 * batch + state / 2**20, "latency_ms": 1 + 0.5 * batch + state / 2**16}


@pytest.mark.parametrize("cls", [PhysicalRegressor, ReplayRegressor])
def test_physical_methods_clone_and_refit(cls, features):
    X = features[cls.feature_set]  # noqa: N806
    y = _targets(X)
    # get_params is __init__'s signature, with the values given to it
    init = [name for name in inspect.signature(cls.__init__).parameters if name != "self"]
    assert sorted(cls().get_params()) == sorted(init) == ["target"]
    assert cls().get_params() == {"target": "mem_used_mib"}
    assert cls(target="latency_ms").get_params() == {"target": "latency_ms"}

    fitted = cls(target="mem_used_mib").fit(X, y["mem_used_mib"])
    assert all(hasattr(fitted, name) for name in MEMORY_ONLY)
    copy = clone(fitted)  # unfitted, same parameters
    assert copy is not fitted and copy.get_params() == fitted.get_params()
    with pytest.raises(NotFittedError):
        check_is_fitted(copy)
    assert not any(hasattr(copy, name) for name in ("coef_", "intercept_", *MEMORY_ONLY))
    np.testing.assert_allclose(copy.fit(X, y["mem_used_mib"]).predict(X), fitted.predict(X))

    # the same estimator refitted for latency keeps nothing of the memory fit
    assert fitted.set_params(target="latency_ms") is fitted
    fitted.fit(X, y["latency_ms"])
    assert not any(hasattr(fitted, name) for name in MEMORY_ONLY)
    assert list(fitted.terms_) == list(cls(target="latency_ms").fit(X, y["latency_ms"]).terms_)
    np.testing.assert_allclose(fitted.predict(X), cls(target="latency_ms").fit(X, y["latency_ms"]).predict(X))
    with pytest.raises(ValueError, match="memory model"):
        fitted.predict_fits(X)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_names_a_feature_set_and_its_types(name):
    cls = METHODS[name]
    assert cls.feature_set in FEATURE_SETS
    assert all(isinstance(t, str) and "." in t for t in getattr(cls, "trusted_types", ()))


def test_default_method_resolves_and_unknown_is_refused():
    assert resolve_method("default") == DEFAULT_METHOD
    assert resolve_method("paper") == "paper"
    with pytest.raises(ConfigError, match="unknown method 'forest'"):
        resolve_method("forest")
