"""Regression methods follow scikit-learn's estimator contract and the METHODS registry's rules."""

from __future__ import annotations

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
from perf4sight.features import FEATURE_SETS, TERM_SETS, FeatureTransformer, queries
from perf4sight.fit import DEFAULT_METHOD, METHODS, PaperExtraTrees, fit_method, make_regressor, resolve_method
from perf4sight.fit.methods import method_problem, trusted_types
from perf4sight.networks import load_architecture

MEMORY_ONLY = ("floor_mib_", "library_mib_", "footprint_mib_", "capacity_mib_")


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
def query() -> pd.DataFrame:
    """Two small networks at five batch sizes, as a query frame (their lifetimes recorded,
    which the replay's features need)."""
    archs = [load_architecture(_net(width), input_size=(3, 16, 16), needs=Detail.LIFETIMES) for width in (8, 16)]
    return pd.concat([queries(arch, [2, 4, 8, 16, 32]) for arch in archs], ignore_index=True)


def _targets(query: pd.DataFrame) -> dict[str, np.ndarray]:
    """Made-up measurements that grow with the batch size and the network's state."""
    state = FeatureTransformer("network").fit_transform(query)["param_state_bytes"].to_numpy(float)
    batch = query["batch_size"].to_numpy(float)
    return {"mem_used_mib": 300 + 2 * batch + state / 2**20, "latency_ms": 1 + 0.5 * batch + state / 2**16}


@pytest.mark.parametrize("method", ["physical", "replay", "planes", "streams", "copies", "heap"])
def test_physical_methods_clone_and_refit(method, query):
    y = _targets(query)
    fitted = fit_method(method, query.assign(net=query["architecture"].map(id)), y["mem_used_mib"], "mem_used_mib")
    assert fitted.get_params()["features__feature_set"] == METHODS[method].feature_set
    assert all(hasattr(fitted[-1], name) for name in MEMORY_ONLY)
    copy = clone(fitted)  # unfitted, same parameters
    assert copy is not fitted and copy.get_params().keys() == fitted.get_params().keys()
    with pytest.raises(NotFittedError):
        check_is_fitted(copy[-1])
    assert not any(hasattr(copy[-1], name) for name in ("coef_", "intercept_", *MEMORY_ONLY))
    np.testing.assert_allclose(copy.fit(query, y["mem_used_mib"]).predict(query), fitted.predict(query), rtol=1e-6)

    latency = make_regressor(method, "latency_ms").fit(query, y["latency_ms"])
    assert not any(hasattr(latency[-1], name) for name in MEMORY_ONLY)
    assert list(latency[-1].terms_) == [term.name for term in TERM_SETS[latency["terms"].term_set].latency]
    assert latency[-1].capacity_mib() == np.inf and fitted[-1].capacity_mib() == fitted[-1].capacity_mib_


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_names_a_feature_set_and_only_trusted_types(name):
    assert METHODS[name].feature_set in FEATURE_SETS
    trusted = set(trusted_types())
    for target in ("mem_used_mib", "latency_ms"):
        for _, step in make_regressor(name, target).steps:
            assert f"{type(step).__module__}.{type(step).__qualname__}" in trusted


def test_default_method_resolves_and_unknown_is_refused():
    assert resolve_method("default") == DEFAULT_METHOD
    assert resolve_method("paper") == "paper"
    with pytest.raises(ConfigError, match="unknown method 'forest'"):
        resolve_method("forest")
    # a library caller's unknown method is the same clear error, not a KeyError
    for call in (lambda: make_regressor("forest", "latency_ms"), lambda: method_problem("forest", [])):
        with pytest.raises(ConfigError,
                           match="method: unknown method 'forest'; known: paper, flat, physical, replay, planes, streams"):
            call()
